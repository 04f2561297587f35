"""fusedattend.benchmarks: how fusedattend's speed is measured, compared and published.

    harness           timing (time_call), benchmark cases and the implementations timed side by side
    cli               python -m fusedattend bench: a sweep of shapes as a table, JSON and a plot
    mlx_lm_decode     decode speed of an mlx_lm model with and without fusedattend.patch_mlx_lm
    perf_compare      a tests/perf run against its chip's newest baseline (ci/perf.sh compare)
    baseline_table    a saved tests/perf baseline as markdown tables
    targets           the project's speed targets, read from one sweep's results
    performance_page  docs/performance.md, written whole from results/<chip>.json
"""
