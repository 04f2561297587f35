"""Shipped test assets, so that an installed fusedattend can check itself (`python -m fusedattend check`).

    oracle   a float64 numpy oracle of fusedattend's semantics and the tolerances against it; it
             shares no code with the implementation (numpy only)
    grids    the fixed parity grids (GRID_A, GRID_B, GRID_Q), their cases and tolerances

The test suite imports both from here: there is one copy.
"""
