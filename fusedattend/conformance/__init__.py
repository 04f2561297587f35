"""Shipped test assets, so that an installed fusedattend can check itself (`python -m fusedattend check`)
and any decode-attention kernel can be checked (`python -m pytest --pyargs fusedattend.conformance
--fa-kernel MODULE:ATTR`, docs/conformance.md).

    oracle           a float64 numpy oracle of fusedattend's semantics and the tolerances against it; it
                     shares no code with the implementation (numpy only)
    grids            the fixed parity grids (GRID_A, GRID_B, GRID_Q), their cases and tolerances
    cases            the conformance cases: a Spec (shapes, mask, seed) and the arrays built from it;
                     Hypothesis strategies inside what a kernel supports; the pinned cases
    kernels          --fa-kernel: finding the function, its calling convention, its declared supports
    properties       the conformance properties, each a check of a kernel on one case
    compare          how they compare outputs: oracle tolerance, bits, in words
    plugin           the pytest plugin (entry point pytest11); inert without --fa-kernel
    test_conformance the tests it collects, one a property
    report           the end-of-run table, the JSON report and its markdown twin
    controls         negative controls: a correct kernel and six broken ones
    targets          fusedattend's entry points with the backend fixed, as --fa-kernel targets

The test suite imports oracle and grids from here: there is one copy.
"""
