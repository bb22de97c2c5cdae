import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def heads_kernel(x, y):
    """out = sigmoid(x) * y + 1 per head; hand-written tiles of one head and 128 tokens."""
    heads, tokens, dim = x.shape
    out = nl.ndarray((heads, tokens, dim), dtype=x.dtype, buffer=nl.shared_hbm)
    for h in nl.affine_range(heads):
        for t in nl.affine_range(tokens // 128):
            xt = nl.load(x[h, t * 128 : (t + 1) * 128, 0:dim])
            yt = nl.load(y[h, t * 128 : (t + 1) * 128, 0:dim])
            gated = nl.multiply(nl.sigmoid(xt), yt)
            nl.store(out[h, t * 128 : (t + 1) * 128, 0:dim], value=nl.add(gated, 1.0))
    return out
