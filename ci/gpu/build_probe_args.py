"""The command line that build_warmth.py and build_pieces.py share: B S pairs, rounds, the cold
copies' MB, and --stub (kernels stubbed, ci/host_cost.py: the scripts run anywhere)."""
import argparse
import sys
from pathlib import Path


def parse(doc, default_shapes):
    """The parsed arguments, with `pairs` the (B, S) shapes; stubs the kernels when asked."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("shapes", nargs="*", type=int, default=default_shapes, help="B S pairs")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--cold-mb", type=int, default=200)
    p.add_argument("--stub", action="store_true", help="kernels stubbed: the script's own check")
    args = p.parse_args()
    if len(args.shapes) % 2:
        p.error("shapes: B S pairs")
    args.pairs = list(zip(args.shapes[::2], args.shapes[1::2]))
    if args.stub:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        import host_cost
        host_cost.stub_cuda()
    return args
