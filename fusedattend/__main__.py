"""python -m fusedattend {check,bench,cpu-contention,generate-bench,tune} ...  (each subcommand's --help says more)."""

import argparse
import importlib
import sys

# name -> (module whose main(argv) runs it, one line for --help)
COMMANDS = {
    "check": ("fusedattend.check", "run the parity grids on the backends here against the float64 oracle"),
    "bench": ("fusedattend.benchmarks.cli", "sweep decode shapes, print a µs and GB/s table, write JSON and a plot"),
    "cpu-contention": ("fusedattend.benchmarks.cpu_contention",
                       "time the cpu backend against mx.fast on the CPU, quiet and with every core loaded"),
    "generate-bench": ("fusedattend.benchmarks.window_generate",
                       "generate with mlx_lm's caches and the quantized window cache: tokens/s, TTFT, memory"),
    "tune": ("fusedattend.tune", "sweep the GPU schedule's parameters on this chip and write its policy file"),
}


def _parser():
    from fusedattend import __version__

    p = argparse.ArgumentParser(
        prog="python -m fusedattend",
        description="fusedattend: fused decode-attention kernels for MLX.",
        epilog="Run `python -m fusedattend <command> --help` for a command's options.",
    )
    p.add_argument("--version", action="version", version=f"fusedattend {__version__}")
    sub = p.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}", title="commands")
    for name, (_, summary) in COMMANDS.items():
        # add_help=False: the command's own parser answers its --help
        sub.add_parser(name, help=summary, add_help=False)
    return p


def _usage_error(message):
    """One line on stderr and exit status 2, as argparse's usage errors have."""
    print(f"python -m fusedattend: error: {message} (see python -m fusedattend --help)", file=sys.stderr)
    return 2


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in COMMANDS:
        # Everything after the command is the command's own: its parser reads it.
        return importlib.import_module(COMMANDS[argv[0]][0]).main(argv[1:])
    if not argv:
        return _usage_error(f"a command is needed: {', '.join(COMMANDS)}")
    if not argv[0].startswith("-"):
        return _usage_error(f"unknown command {argv[0]!r}: choose from {', '.join(COMMANDS)}")
    try:
        _parser().parse_args(argv)  # --help and --version exit here
    except SystemExit as exit_:
        return exit_.code
    return _usage_error(f"a command is needed: {', '.join(COMMANDS)}")


if __name__ == "__main__":
    sys.exit(main())
