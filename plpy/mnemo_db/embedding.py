"""Sentence embeddings with all-MiniLM-L6-v2, served from its ONNX export.

Same pipeline as sentence-transformers (WordPiece tokens truncated to 256, BERT
encoder, mean pooling over the attention mask, L2 normalisation) but on onnxruntime
+ tokenizers, which load in a fraction of a second where torch takes ~10 s. The
sentence-transformers model stays the reference: tests/py/db/test_embedding.py checks
cosine >= 0.999 between the two.
"""

from __future__ import annotations

import functools
import os
import threading
from concurrent.futures import Executor, Future

import numpy as np

DIMENSIONS = 384
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json)
HANDOFF_TIMEOUT_S = 0.005  # see Embedder.start
# A mini-batch of this many word pieces (padded) or more frees buffers of tens of MB,
# which glibc keeps in the backend's heap unless told to hand them back (Embedder.embed):
# +160 MB kept after 32 texts of 256 word pieces. Below it, the trim is not worth its cost.
RELEASE_AFTER_TOKENS = 2048

_lock = threading.Lock()
_model: Embedder | None = None


# model.onnx with its weights, and the encoder's pre-packed copies of them, in a file
# of their own (prepare_mapped), which onnxruntime maps into memory instead of copying
# them into each backend's heap.
MAPPED_MODEL = "model.prepacked.onnx"
# Embedded at install by model.onnx (its vector stored beside the mapped model, .probe)
# and by the mapped model when a backend loads it: see Embedder.__init__.
PROBE_TEXT = "Probe: the staging database moved to port 6543 on 7 May 2023."
PROBE_TOLERANCE = 1e-5


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
    """The model a backend loads: the mapped one when it is there (with its probe) and
    not older than model.onnx (the same network, the same numbers), else model.onnx."""
    plain = os.path.join(model_dir, "model.onnx")
    mapped = os.path.join(model_dir, MAPPED_MODEL)
    try:
        if os.path.getmtime(mapped) >= os.path.getmtime(plain) and all(
                os.path.exists(mapped + ext) for ext in (".data", ".probe")):
            return mapped
    except OSError:
        pass
    return plain


def prepare_mapped(model_dir: str) -> str:
    """Writes model_dir/model.prepacked.onnx (+ .data, .probe): model.onnx as
    onnxruntime optimises it at load (the portable EXTENDED level; a backend's session
    adds the rest), its weights in an external file, and with them the copies of the
    weights that the CPU kernels pre-pack into their own layout at every load
    (~42 MB). A backend maps that file instead of reading the weights and packing them
    into its heap: the pages are the page cache's, shared by every backend, and the
    word-embedding table (47 MB of the 90) is mostly never touched. Measured per
    backend: heap (RssAnon) 111 -> 65 MB with the mapped weights, and 40 MB less
    again with the packed ones; the same latency and the same vectors. The packed layout is the
    CPU's and the onnxruntime version's: .probe holds the vector model.onnx gives
    PROBE_TEXT, which a backend checks the mapped model against (Embedder), and the
    install writes the files again when onnxruntime changes. Written under temporary
    names and renamed, the model last, so a backend never loads half a model. Run by
    the install (scripts/install-python.sh, Dockerfile) with the server's onnxruntime."""
    import onnxruntime as ort

    tmp_dir = os.path.join(model_dir, f".mapped-{os.getpid()}")
    os.makedirs(tmp_dir, exist_ok=True)
    opts = _session_options(1)
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = os.path.join(tmp_dir, MAPPED_MODEL)
    opts.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                  MAPPED_MODEL + ".data")
    opts.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    opts.add_session_config_entry("session.save_external_prepacked_constant_initializers", "1")
    ort.InferenceSession(os.path.join(model_dir, "model.onnx"), opts, providers=["CPUExecutionProvider"])
    probe = Embedder(model_dir, model_file="model.onnx").embed([PROBE_TEXT])[0]
    probe.astype("<f4").tofile(os.path.join(tmp_dir, MAPPED_MODEL + ".probe"))
    for name in (MAPPED_MODEL + ".data", MAPPED_MODEL + ".probe", MAPPED_MODEL):
        os.replace(os.path.join(tmp_dir, name), os.path.join(model_dir, name))
    os.rmdir(tmp_dir)
    return os.path.join(model_dir, MAPPED_MODEL)


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

        self.tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.no_padding()
        path = os.path.join(model_dir, model_file) if model_file else model_path(model_dir)

        def session(path: str):
            return ort.InferenceSession(path, _session_options(threads), providers=["CPUExecutionProvider"])

        self.session = session(path)
        if path.endswith(MAPPED_MODEL) and not self.probe_matches(path + ".probe"):
            # pre-packed on another CPU or onnxruntime: model.onnx gives the vectors
            import warnings

            warnings.warn(f"{path} does not reproduce its probe here; loading model.onnx", stacklevel=2)
            self.session = session(os.path.join(model_dir, "model.onnx"))
        release_freed_memory()

    def probe_matches(self, probe_file: str) -> bool:
        """This session embeds PROBE_TEXT as model.onnx did at install (probe_file)."""
        expected = np.fromfile(probe_file, dtype="<f4")
        got = self.embed([PROBE_TEXT])[0]
        return expected.shape == got.shape and float(np.abs(got - expected).max()) <= PROBE_TOLERANCE

    def inputs(self, texts: list[str]) -> dict[str, np.ndarray]:
        """The encoder's inputs for a mini-batch: WordPiece ids padded to the longest
        text, the attention mask, token types."""
        encs = self.tokenizer.encode_batch([t or "" for t in texts])
        width = max(len(e.ids) for e in encs)
        ids = np.zeros((len(texts), width), dtype=np.int64)
        mask = np.zeros((len(texts), width), dtype=np.int64)
        for row, e in enumerate(encs):
            ids[row, : len(e.ids)] = e.ids
            mask[row, : len(e.ids)] = 1
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}

    def embed(self, texts: list[str]) -> np.ndarray:
        """Return an array (len(texts), 384) of L2-normalised float32 embeddings."""
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        # Sort by length so that each mini-batch pads to similar lengths.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        largest = 0
        for start in range(0, len(order), 32):
            idx = order[start:start + 32]
            inputs = self.inputs([texts[i] for i in idx])
            largest = max(largest, inputs["input_ids"].size)
            out[idx] = mean_pooled(self.session.run(None, inputs)[0], inputs["attention_mask"])
        if largest >= RELEASE_AFTER_TOKENS:
            release_freed_memory()
        return out

    def start(self, text: str, executor: Executor) -> PendingEmbedding:
        """Starts embedding one text on the executor's thread and returns once the
        encoder has started. The text is tokenized here, so that the thread runs
        nothing but the encoder, which releases the GIL. The thread needs the GIL to
        start, and a compile's statements hold it while they run in PL/Python, so
        it would start late on the longer of a compile's two paths: waiting here
        (a thread wake-up) starts it at once (docs/performance.md). Bounded: a
        thread still busy with an earlier text is not waited for."""
        inputs = self.inputs([text])
        started = threading.Event()

        def encode():
            started.set()
            return self.session.run(None, inputs)

        future = executor.submit(encode)
        started.wait(HANDOFF_TIMEOUT_S)
        return PendingEmbedding(future, inputs["attention_mask"])


class PendingEmbedding:
    """An embedding whose encoder runs elsewhere; result() waits and pools it."""

    def __init__(self, future: Future, mask: np.ndarray):
        self._future = future
        self._mask = mask

    def result(self) -> np.ndarray:
        """The embeddings, (n, 384) L2-normalised float32."""
        return mean_pooled(self._future.result()[0], self._mask)


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
        sys.exit(f"usage: python -m mnemo_db.embedding MODEL_DIR  (writes MODEL_DIR/{MAPPED_MODEL})")
    print(f"wrote {prepare_mapped(sys.argv[1])}")
