"""python -m fusedattend {check,bench} ...  (each subcommand's --help says more)."""

import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    commands = {"check": "fusedattend.check", "bench": "fusedattend.bench"}
    if not argv or argv[0] not in commands:
        print("usage: python -m fusedattend {check,bench} [options]\n"
              "  check  run the parity grid on the best backend here and print max errors\n"
              "  bench  sweep decode shapes, print a GB/s table, write JSON and a plot",
              file=sys.stderr)
        return 2
    import importlib

    return importlib.import_module(commands[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
