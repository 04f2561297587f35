"""Where MLX has no backend (Linux `pip install mlx` alone), importing fusedattend says what to install."""

import subprocess
import sys


def test_import_without_mlx_backend_names_the_extras():
    code = (
        "import sys\n"
        "sys.modules['mlx.core'] = None  # as if libmlx.so were missing: `import mlx.core` fails\n"
        "import fusedattend\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "ImportError" in proc.stderr
    # fusedattend is not published: the hint installs the extras from a clone
    assert "pip install -e '.[cpu]'" in proc.stderr and "pip install -e '.[cuda]'" in proc.stderr
