"""Metal kernel sources of fusedattend (installed as the package ``fusedattend.metal``)."""
