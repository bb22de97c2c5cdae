"""Mamba selective scan in the nki.* language (NKI 0.7), after ../mamba.py: per channel tile
and state, exp(delta * A[:, s]) on the Scalar Engine, the scan h = decay * h + delta * u * B on
the Vector Engine (`nisa.tensor_tensor_scan`), the state carried across sequence chunks, and
y += h * C."""

import nki.isa as nisa
import nki.language as nl

import nki

CHANNELS = 128  # channels per tile (partitions)
CHUNK = 512  # sequence positions per chunk


# accelopt: reference ../mamba_ref.py
@nki.jit
def mamba_scan_kernel(delta, u, a, b, c):
    n_channels, seq_len = delta.shape
    n_states = a.shape[1]
    out = nl.ndarray((n_channels, seq_len), dtype=nl.float32, buffer=nl.shared_hbm)

    for ct in range(n_channels // CHANNELS):
        ch = slice(ct * CHANNELS, (ct + 1) * CHANNELS)
        a_tile = nl.ndarray((CHANNELS, n_states), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_tile, src=a[ch, 0:n_states])
        # h at the last position of the previous chunk, one column per state
        carry = nl.ndarray((CHANNELS, n_states), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=carry, value=0.0)

        for t in range(seq_len // CHUNK):
            ts = slice(t * CHUNK, (t + 1) * CHUNK)
            delta_tile = nl.ndarray((CHANNELS, CHUNK), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=delta_tile, src=delta[ch, ts])
            u_tile = nl.ndarray((CHANNELS, CHUNK), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=u_tile, src=u[ch, ts])
            delta_u = nl.ndarray((CHANNELS, CHUNK), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=delta_u, data1=delta_tile, data2=u_tile, op=nl.multiply)
            y = nl.ndarray((CHANNELS, CHUNK), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=y, value=0.0)

            for s in range(n_states):
                decay = nl.ndarray((CHANNELS, CHUNK), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=decay, op=nl.exp, data=delta_tile, scale=a_tile[:, s : s + 1])
                b_row = nl.ndarray((1, CHUNK), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=b_row, src=b[s : s + 1, ts])
                drive = nl.ndarray((CHANNELS, CHUNK), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(
                    dst=drive, data1=delta_u, data2=nl.broadcast_to(b_row, (CHANNELS, CHUNK)), op=nl.multiply
                )
                h = nl.ndarray((CHANNELS, CHUNK), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor_scan(
                    dst=h, data0=decay, data1=drive, initial=carry[:, s : s + 1], op0=nl.multiply, op1=nl.add
                )
                nisa.tensor_copy(dst=carry[:, s : s + 1], src=h[:, CHUNK - 1 : CHUNK])
                c_row = nl.ndarray((1, CHUNK), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=c_row, src=c[s : s + 1, ts])
                weighted = nl.ndarray((CHANNELS, CHUNK), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(
                    dst=weighted, data1=h, data2=nl.broadcast_to(c_row, (CHANNELS, CHUNK)), op=nl.multiply
                )
                nisa.tensor_tensor(dst=y, data1=y, data2=weighted, op=nl.add)

            nisa.dma_copy(dst=out[ch, ts], src=y)

    return out
