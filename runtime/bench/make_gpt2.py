"""Write a GPT-2-shaped ONNX model (forward graph) for the GPU benchmark.

  python3 runtime/bench/make_gpt2.py -o gpt2.onnx                  # GPT-2 small, seq 512
  python3 runtime/bench/make_gpt2.py -o tiny.onnx --layers 2 --d-model 64 --heads 4 --seq 32 --vocab 100

The graph follows fixtures/make_small_models.py's tiny_gpt block (the ops exporters emit),
with GPT-2 small's sizes by default: 12 layers, d_model 768, 12 heads, an MLP of 4·d_model,
vocabulary 50257, learned position embeddings, pre-LayerNorm blocks, GELU (erf form), a
causal mask, a final LayerNorm and an untied LM head (so 163M parameters, not GPT-2's 124M
with tied embeddings; the PyTorch model in gpu_benchmark.py has the same structure). No
dropout. Tokens int64 [batch, seq] -> logits [batch, seq, vocab], batch symbolic.

Weights are ConstantOfShape nodes fed by int64 shape initializers, as in the ONNX model-zoo
"light" models: the file stays small and `lms compile` initialises them itself (He/Xavier,
ones for LayerNorm scales, zeros for biases). Deterministic: the same arguments write the
same bytes. Needs onnx and numpy (fixtures/.venv has both).
"""

import argparse
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    """Collects nodes and initializers; names every node after its first output."""

    def __init__(self):
        self.nodes = []
        self.initializers = []

    def node(self, op_type, inputs, output, **attrs):
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=output, **attrs))
        return output

    def nodes_multi(self, op_type, inputs, outputs, **attrs):
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=outputs[0], **attrs))
        return outputs

    def constant(self, name, array):
        return self.node("Constant", [], name, value=numpy_helper.from_array(array, name))

    def parameter(self, name, shape):
        """A weight made by ConstantOfShape from a shape initializer."""
        shape_name = f"{name}.shape"
        self.initializers.append(numpy_helper.from_array(np.array(shape, np.int64), shape_name))
        zero = numpy_helper.from_array(np.zeros(1, np.float32), f"{name}.zero")
        return self.node("ConstantOfShape", [shape_name], name, value=zero)


def gpt2(layers, d_model, heads, seq, vocab):
    """The ONNX model of a GPT-2-shaped decoder."""
    if d_model % heads:
        raise SystemExit(f"d_model {d_model} is not a multiple of heads {heads}")
    head_dim = d_model // heads
    b = Builder()

    def f32(value):
        return np.array(value, dtype=np.float32)

    def i64(value):
        return np.array(value, dtype=np.int64)

    def linear(x, name, n_in, n_out):
        w = b.parameter(f"{name}.weight", [n_in, n_out])
        bias = b.parameter(f"{name}.bias", [n_out])
        return b.node("Add", [b.node("MatMul", [x, w], f"{name}.matmul"), bias], name)

    def layer_norm(x, name):
        gamma = b.parameter(f"{name}.gamma", [d_model])
        beta = b.parameter(f"{name}.beta", [d_model])
        return b.node("LayerNormalization", [x, gamma, beta], name, axis=-1, epsilon=1e-5)

    # Shared constants.
    split = b.constant("split_sizes", i64([d_model] * 3))
    heads_shape = b.constant("heads_shape", i64([0, seq, heads, head_dim]))
    merged_shape = b.constant("merged_shape", i64([0, seq, d_model]))
    scale = b.constant("attn_scale", f32(1.0 / np.sqrt(head_dim)))
    mask = b.constant("causal_mask", np.triu(np.full((seq, seq), -1e9, np.float32), k=1))
    sqrt2 = b.constant("sqrt2", f32(np.sqrt(2.0)))
    one = b.constant("one", f32(1.0))
    half = b.constant("half", f32(0.5))

    wte = b.parameter("wte", [vocab, d_model])
    wpe = b.parameter("wpe", [seq, d_model])
    h = b.node("Add", [b.node("Gather", [wte, "tokens"], "tok_emb", axis=0), wpe], "emb")

    for layer in range(layers):
        p = f"h{layer}"
        qkv = linear(layer_norm(h, f"{p}.ln1"), f"{p}.attn.qkv", d_model, 3 * d_model)
        q, k, v = b.nodes_multi("Split", [qkv, split], [f"{p}.q", f"{p}.k", f"{p}.v"], axis=-1)

        def heads_of(x, name, perm):
            r = b.node("Reshape", [x, heads_shape], f"{name}.heads")
            return b.node("Transpose", [r], f"{name}.t", perm=perm)

        q = heads_of(q, f"{p}.q", [0, 2, 1, 3])
        k = heads_of(k, f"{p}.k", [0, 2, 3, 1])
        v = heads_of(v, f"{p}.v", [0, 2, 1, 3])
        scores = b.node("Mul", [b.node("MatMul", [q, k], f"{p}.scores"), scale], f"{p}.scaled")
        probs = b.node("Softmax", [b.node("Add", [scores, mask], f"{p}.masked")], f"{p}.probs", axis=-1)
        ctx = b.node("Transpose", [b.node("MatMul", [probs, v], f"{p}.context")], f"{p}.context.t",
                     perm=[0, 2, 1, 3])
        ctx = b.node("Reshape", [ctx, merged_shape], f"{p}.merged")
        h = b.node("Add", [h, linear(ctx, f"{p}.attn.proj", d_model, d_model)], f"{p}.attn.residual")

        x = linear(layer_norm(h, f"{p}.ln2"), f"{p}.mlp.fc", d_model, 4 * d_model)
        erf = b.node("Erf", [b.node("Div", [x, sqrt2], f"{p}.gelu.div")], f"{p}.gelu.erf")
        gelu = b.node("Mul", [b.node("Mul", [x, b.node("Add", [erf, one], f"{p}.gelu.add")],
                                     f"{p}.gelu.mul"), half], f"{p}.gelu")
        h = b.node("Add", [h, linear(gelu, f"{p}.mlp.proj", 4 * d_model, d_model)], f"{p}.mlp.residual")

    lm_head = b.parameter("lm_head.weight", [d_model, vocab])
    b.node("MatMul", [layer_norm(h, "ln_f"), lm_head], "logits")
    graph = helper.make_graph(
        b.nodes,
        "gpt2",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["batch", seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", seq, vocab])],
        b.initializers,
    )
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)],
                             producer_name="lms-bench")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", required=True, type=pathlib.Path)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=50257)
    args = parser.parse_args()
    model = gpt2(args.layers, args.d_model, args.heads, args.seq, args.vocab)
    onnx.checker.check_model(model, full_check=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(args.output))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
