"""Sentence embeddings with all-MiniLM-L6-v2, served from its ONNX export.

Same pipeline as sentence-transformers (WordPiece tokens truncated to 256, BERT
encoder, mean pooling over the attention mask, L2 normalisation) but on onnxruntime
+ tokenizers, which load in a fraction of a second where torch takes ~10 s. The
server runs model.onnx with int8 weights (model.int8.onnx, written by the export:
faster, a quarter of the weights, the same evidence recall); model.onnx itself
is the fallback. The sentence-transformers model stays the reference:
tests/py/db/test_embedding.py checks cosine >= 0.999 to model.onnx and >= 0.97 to
the server model.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future

import numpy as np

from .recent import Recent, digest

DIMENSIONS = 384
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json)
HANDOFF_TIMEOUT_S = 0.005  # see Embedder.start
# Encoding this many word pieces in one call or more frees buffers of tens of MB, which
# glibc keeps in the backend's heap unless told to hand them back (Embedder.embed):
# +160 MB kept after 32 texts of 256 word pieces. Below it, the trim is not worth its cost.
RELEASE_AFTER_TOKENS = 2048
# Texts whose vectors a backend keeps (Embedder.recall): ~0.4 MB.
RECENT_TEXTS = 256

_lock = threading.Lock()
_model: Embedder | None = None


# The model a backend loads: model.onnx with its weights quantized to int8 (7-bit
# range, per channel) and kept in a file of their own, which onnxruntime maps instead
# of copying into each backend's heap (scripts/export_onnx.py, quantize).
SERVER_MODEL = "model.int8.onnx"
# Embedded by model.onnx at install (the vector is stored beside the server model,
# .probe); a backend checks that the server model embeds it alike: see Embedder.
PROBE_TEXT = "Probe: the staging database moved to port 6543 on 7 May 2023."
# The int8 model's vectors against model.onnx's (and sentence-transformers'): cosine
# 0.980-0.993 on tests/py/db/test_embedding.py's samples (mean 0.9905, min 0.966 on
# LoCoMo turns), 0.9917 on PROBE_TEXT. Below this, the CPU's integer kernels do not
# compute this model (a saturating u8s8 product would): the backend loads model.onnx.
PROBE_MIN_COSINE = 0.98


def _session_options(threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    # One backend = one query: parallelism comes from many backends, and a
    # backend that grabs every core slows its neighbours down.
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    # No arena and no memory patterns: with them a backend keeps, for its life, the
    # buffers of the largest batch it ever encoded (+132 MB of heap after 8 texts of
    # 256 word pieces, against +15 MB without; the same latency within noise).
    opts.enable_cpu_mem_arena = False
    opts.enable_mem_pattern = False
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return opts


def model_path(model_dir: str) -> str:
    """The model a backend loads: the server model when it is there (with its weights
    and probe) and not older than model.onnx, else model.onnx."""
    plain = os.path.join(model_dir, "model.onnx")
    server = os.path.join(model_dir, SERVER_MODEL)
    try:
        if os.path.getmtime(server) >= os.path.getmtime(plain) and all(
                os.path.exists(server + ext) for ext in (".data", ".probe")):
            return server
    except OSError:
        pass
    return plain


def write_probe(model_dir: str) -> str:
    """Writes model_dir/model.int8.onnx.probe: the vector model.onnx gives PROBE_TEXT,
    which a backend checks the server model against (Embedder). The server model
    itself is written by the export (scripts/export_onnx.py, quantize: its figures are
    there). Run by the install (scripts/install-python.sh, Dockerfile) with the
    server's onnxruntime; written under a temporary name and renamed."""
    probe = Embedder(model_dir, model_file="model.onnx").embed([PROBE_TEXT])[0]
    path = os.path.join(model_dir, SERVER_MODEL + ".probe")
    probe.astype("<f4").tofile(path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


def release_freed_memory() -> None:
    """Hands the heap's free pages back to the system (glibc's malloc_trim): loading
    the model (and the token counter's vocabulary before it) leaves ~35 MB of freed
    parse buffers, and a large batch tens of MB of freed tensors, that glibc would
    otherwise keep in the backend for its life. A no-op where the C library has no
    malloc_trim."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    """The C library's malloc_trim, or None (looked up once: find_library runs ldconfig)."""
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


class Embedder:
    def __init__(self, model_dir: str, threads: int = 1, model_file: str | None = None):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self._recent = Recent(RECENT_TEXTS)  # recall / remember
        self.tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.no_padding()
        path = os.path.join(model_dir, model_file) if model_file else model_path(model_dir)

        def session(path: str):
            return ort.InferenceSession(path, _session_options(threads), providers=["CPUExecutionProvider"])

        if path.endswith(SERVER_MODEL):
            # The server model falls back to model.onnx where this onnxruntime cannot
            # load it (an older one than the export's: its graph holds fused operators)
            # or where this CPU's integer kernels do not compute it (its probe).
            try:
                self.session = session(path)
                problem = None if self.probe_matches(path + ".probe") else "does not reproduce its probe here"
            except Exception as e:  # noqa: BLE001 (onnxruntime's errors, Fail, InvalidGraph, ..., share no base)
                problem = f"cannot be loaded here ({type(e).__name__}: {e})"
            if problem:
                import warnings

                warnings.warn(f"{path} {problem}; loading model.onnx", stacklevel=2)
                path = os.path.join(model_dir, "model.onnx")
        if not path.endswith(SERVER_MODEL):
            self.session = session(path)
        self._recent.clear()  # the probe's vector, maybe of the model set aside
        release_freed_memory()

    def probe_matches(self, probe_file: str) -> bool:
        """This session embeds PROBE_TEXT as model.onnx did at install (probe_file),
        within the quantization's error (PROBE_MIN_COSINE)."""
        expected = np.fromfile(probe_file, dtype="<f4")
        got = self.embed([PROBE_TEXT])[0]
        return expected.shape == got.shape and float(got @ expected) >= PROBE_MIN_COSINE

    def inputs(self, text: str) -> dict[str, np.ndarray]:
        """The encoder's inputs for one text (one per run: see embed): its WordPiece
        ids, the attention mask, token types."""
        ids = np.asarray([self.tokenizer.encode(text or "").ids], dtype=np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}

    def embed(self, texts: list[str]) -> np.ndarray:
        """Return an array (len(texts), 384) of L2-normalised float32 embeddings.
        One text per encoder run: the quantized model scales its activations by each
        run's range, so a text's vector would otherwise depend on the texts beside it
        (and padding is work too: one by one is as fast as mini-batches here)."""
        out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        tokens = 0
        for row, text in enumerate(texts):
            key = digest(text)
            vector = self.recall(key)
            if vector is None:
                inputs = self.inputs(text)
                tokens += inputs["input_ids"].size
                vector = self.remember(key, mean_pooled(self.session.run(None, inputs)[0], inputs["attention_mask"])[0])
            out[row] = vector
        if tokens >= RELEASE_AFTER_TOKENS:
            release_freed_memory()
        return out

    def recall(self, key: bytes) -> np.ndarray | None:
        """The vector of a text this backend embedded lately (by recent.digest), or None.
        The same text comes back within moments: a user message is embedded when it is
        recorded (paging's topic shift), and again as the query of the compile that
        follows; a proxy's next call compares it with the new message."""
        return self._recent.get(key)

    def remember(self, key: bytes, vector: np.ndarray) -> np.ndarray:
        """Keeps a text's vector for recall (the RECENT_TEXTS latest, ~1.5 kB each),
        read-only: callers get it back as is."""
        vector.setflags(write=False)
        return self._recent.put(key, vector)

    def start(self, text: str, executor: Executor) -> PendingEmbedding:
        """Starts embedding one text on the executor's thread and returns once the
        encoder has started. The text is tokenized here, so that the thread runs
        nothing but the encoder, which releases the GIL. The thread needs the GIL to
        start, and a compile's statements hold it while they run in PL/Python, so
        it would start late on the longer of a compile's two paths: waiting here
        (a thread wake-up) starts it at once (docs/performance.md). Bounded: a
        thread still busy with an earlier text is not waited for."""
        key = digest(text)
        vector = self.recall(key)
        if vector is not None:
            return PendingEmbedding.known(vector)
        inputs = self.inputs(text)
        started = threading.Event()

        def encode():
            started.set()
            return self.session.run(None, inputs)

        future = executor.submit(encode)
        started.wait(HANDOFF_TIMEOUT_S)
        return PendingEmbedding(future, inputs["attention_mask"], on_done=lambda v: self.remember(key, v))


class PendingEmbedding:
    """An embedding whose encoder runs elsewhere; result() waits and pools it (once:
    on_done gets the vector). PendingEmbedding.known: one already there."""

    def __init__(self, future: Future | None, mask: np.ndarray | None,
                 on_done: Callable[[np.ndarray], object] | None = None):
        self._future = future
        self._mask = mask
        self._vectors: np.ndarray | None = None
        self._on_done = on_done

    @classmethod
    def known(cls, vector: np.ndarray) -> PendingEmbedding:
        """One whose vector is already there (nothing runs)."""
        pending = cls(None, None)
        pending._vectors = vector[None, :]
        return pending

    def result(self) -> np.ndarray:
        """The embeddings, (n, 384) L2-normalised float32."""
        if self._vectors is None:
            self._vectors = mean_pooled(self._future.result()[0], self._mask)
            if self._on_done is not None:
                self._on_done(self._vectors[0])
        return self._vectors


def mean_pooled(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Sentence embeddings from the encoder's token states: the mean over the
    attention mask, L2-normalised (sentence-transformers' pooling for this model)."""
    m = mask[:, :, None].astype(np.float32)
    pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
    return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)


def get_embedder(model_dir: str, threads: int = 1) -> Embedder:
    """The per-process model, loaded on first use (once per database backend)."""
    global _model
    if _model is None:
        with _lock:
            if _model is None:
                if not os.path.exists(os.path.join(model_dir, "model.onnx")):
                    raise FileNotFoundError(
                        f"no ONNX model in {model_dir}; run 'make up' (or set mnemo.model_dir)"
                    )
                _model = Embedder(model_dir, threads)
    return _model


MODEL_SETTINGS = ("SELECT mnemo_internal.setting('model_dir') #>> '{}' AS dir,"
                  " mnemo_internal.setting('embed_threads') #>> '{}' AS threads")


def server_embedder(plpy) -> Embedder:
    """The backend's model for the PL/Python bodies (mnemo.embed, mnemo.embed_batch),
    loaded on first use from the model_dir and embed_threads settings."""
    if _model is not None:
        return _model
    s = plpy.execute(MODEL_SETTINGS)[0]
    if not s["dir"]:
        plpy.error("the model_dir setting is empty", sqlstate="MN011", hint="Run the deploy (make up).")
    return get_embedder(s["dir"], int(s["threads"]))


def loaded() -> Embedder | None:
    """The model, if this process has loaded it."""
    return _model


def to_pgvector(vec: np.ndarray) -> str:
    """Text form of a vector that PostgreSQL casts to pgvector's vector type."""
    return "[" + ",".join(f"{x:.7g}" for x in vec.tolist()) + "]"


def quantize_int8(data: bytes | None) -> tuple[bytes, bytes]:
    """Vectors concatenated as pgvector sends them (see from_pgvector_bytes) as int8
    codes and one scale per vector (big-endian float4, as float4send): a vector is
    about scale x codes (symmetric, scale = max |x| / 127: cosine error ~1e-3). A
    sealed retrieval segment keeps its vectors this way, a quarter of float4: every
    compile reads all of a tenant's, and at 1.5 kB a vector they were the largest
    thing it read (and the first to fall out of shared buffers)."""
    x = np.frombuffer(data or b"", dtype=">f4").reshape(-1, DIMENSIONS).astype(np.float32)
    scale = np.abs(x).max(axis=1, initial=0.0) / 127.0
    with np.errstate(divide="ignore", invalid="ignore"):
        codes = np.nan_to_num(np.rint(x / scale[:, None]))
    return np.clip(codes, -127, 127).astype(np.int8).tobytes(), scale.astype(">f4").tobytes()


def from_int8_codes(data: bytes | None, rows: int) -> np.ndarray:
    """`rows` vectors of int8 codes (quantize_int8) as an int8 matrix of the codes
    (not yet scaled; a product with a float32 vector is computed in float32)."""
    if not rows or not data:
        return np.zeros((0, 0), dtype=np.int8)
    return np.frombuffer(data, dtype=np.int8).reshape(rows, -1)


def from_pgvector_bytes(data: bytes | None, rows: int) -> np.ndarray:
    """`rows` vectors concatenated as pgvector sends them (big-endian float4 each,
    without the 4-byte dimension header) as a float32 matrix."""
    if not rows or not data:
        return np.zeros((0, 0), dtype=np.float32)
    return np.frombuffer(data, dtype=">f4").reshape(rows, -1).astype(np.float32)


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        sys.exit(f"usage: python -m mnemo_db.embedding MODEL_DIR  (writes MODEL_DIR/{SERVER_MODEL}.probe)")
    print(f"wrote {write_probe(sys.argv[1])}")
