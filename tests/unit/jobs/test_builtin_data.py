"""The built-in job's data: scikit-learn's digits, read without importing scikit-learn."""

from __future__ import annotations

import subprocess
import sys

import numpy as np


def test_the_digits_file_read_directly_equals_load_digits():
    from sklearn.datasets import load_digits

    from jobs.builtin.image_classification import load_digits_arrays

    x, y = load_digits_arrays()
    want_x, want_y = load_digits(return_X_y=True)
    assert np.array_equal(x, want_x) and np.array_equal(y, want_y)
    assert x.dtype == want_x.dtype and y.dtype == want_y.dtype


def test_loading_the_split_does_not_import_scikit_learn():
    code = ("import sys\nfrom jobs.builtin.image_classification import load_split\n"
            "x, y, xt, yt = load_split()\nassert len(x) + len(xt) == 1797, len(x)\n"
            "print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"
