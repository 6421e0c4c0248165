"""Vectors for `gateway ingest`, made outside the gateway with the same bge-small model.

Needs only onnxruntime, tokenizers and numpy, and the model's two files as the gateway keeps them
(`GATEWAY_MODEL_DIR`, by default `.gateway/models`, after its first start):

    python docs/examples/vectors/embed_outside.py .gateway/models/bge-small-en-v1.5-q-1.11.0-beta19 \\
        items.ndjson > items-with-vectors.ndjson
    gateway ingest --tenant acme items-with-vectors.ndjson

Each input line is an item (memory, document or property); each output line is the same item with
`vector` and `vector_model`. What makes the vectors the gateway's own: the same file (its id ends
in the first 12 hex digits of its SHA-256), the same tokenizer truncated at 512 tokens, the first
token's state (CLS pooling), unit length, and the same passage (a document section's heading path,
a newline, then its text).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime
from tokenizers import Tokenizer

BATCH = 16


def passage(item: dict) -> str:
    text, section = item.get("text") or "", item.get("section")
    return f"{section}\n{text}" if section and not text.startswith(section) else text


def main(model_dir: Path, items_path: Path) -> None:
    model = (model_dir / "model.onnx").read_bytes()
    model_id = f"bge-small-en-v1.5-q@{hashlib.sha256(model).hexdigest()[:12]}"
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(512)
    tokenizer.enable_padding()
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    items = [json.loads(line) for line in items_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for start in range(0, len(items), BATCH):
        batch = items[start : start + BATCH]
        encodings = tokenizer.encode_batch([passage(item) for item in batch])
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        vectors = hidden[:, 0, :]
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        for item, vector in zip(batch, vectors):
            print(json.dumps({**item, "vector": [round(float(x), 7) for x in vector], "vector_model": model_id}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
