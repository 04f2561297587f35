"""ci/gpu/decode_loop.py: the table of its runs (the growing and fixed-S cells, the ratios, a peer that
raised), and the same cache lengths for every implementation it times."""
import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("decode_loop", Path(__file__).resolve().parents[1] / "ci/gpu/decode_loop.py")
decode_loop = importlib.util.module_from_spec(spec)
spec.loader.exec_module(decode_loop)


def run(B, S0, **queued):
    row = {"B": B, "S0": S0}
    for name, (grow, fixed) in queued.items():
        row[f"queued: {name}, growing"], row[f"queued: {name}, fixed S"] = grow, fixed
    return row


def test_rows_sorted_with_ratios_and_failures():
    late = run(8, 2048, **{"fused bf16": (50.0, 60.0), "mx.fast.sdpa": (100.0, 40.0), "fused 4-bit": (40.0, 45.0)})
    late["error: mlx_lm 4-bit"] = "[quantized_matmul] No implementation"
    early = run(1, 512, **{"fused bf16": (20.0, 21.0), "mx.fast.sdpa": (10.0, 10.0), "fused 4-bit": (40.0, 41.0),
                           "mlx_lm 4-bit": (400.0, 380.0)})
    lines = decode_loop.table([late, early]).splitlines()
    assert len(lines) == 4
    assert lines[2] == ("| 1 | 512 | 20.0 (21.0) | 10.0 (10.0) | 0.50x | 40.0 (41.0) | 400.0 (380.0) | 10.00x "
                        "| 0.25x |")
    assert lines[3] == "| 8 | 2048 | 50.0 (60.0) | 100.0 (40.0) | 2.00x | 40.0 (45.0) | fails | – | 2.50x |"


def test_every_implementation_reads_the_same_cache_lengths(monkeypatch, capsys):
    """The script's loops give each implementation the same sequence of S (until 2026-12-02 one
    counter ran on through them, and the peers, timed later, read longer caches)."""
    import mlx.core as mx
    import mlx_lm.models.base as mlx_lm_base

    import fusedattend as fa

    lengths = {}

    def recording(name, keys_at):
        def call(x, *args, **kwargs):
            lengths.setdefault(name, []).append(keys_at(args).shape[2])
            return x
        return call

    monkeypatch.setattr(fa, "decode_attention", recording("fused bf16", lambda a: a[0]))
    monkeypatch.setattr(fa, "quantized_decode_attention", recording("fused 4-bit", lambda a: a[0][0]))
    monkeypatch.setattr(mx.fast, "scaled_dot_product_attention", recording("mx.fast.sdpa", lambda a: a[0]))
    monkeypatch.setattr(mlx_lm_base, "quantized_scaled_dot_product_attention",
                        recording("mlx_lm 4-bit", lambda a: a[0][0]))
    monkeypatch.setattr("sys.argv", ["decode_loop.py", "1", "16", "--steps", "3", "--rounds", "2"])
    monkeypatch.delenv("OUT", raising=False)
    decode_loop.main()
    capsys.readouterr()
    assert set(lengths) == {"fused bf16", "fused 4-bit", "mx.fast.sdpa", "mlx_lm 4-bit"}
    sequences = list(lengths.values())
    assert all(s == sequences[0] for s in sequences)
    assert sequences[0][1:10] == list(range(16, 25))  # after the first call: the queued loop grows
