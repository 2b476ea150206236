"""Reading plotly's JSON in tests: plotly.py writes numpy arrays as typed arrays."""
import base64

import numpy as np


def arr(v) -> list:
    """A plotly JSON array as a list: a list as it is, or a typed array {"dtype", "bdata"[, "shape"]}
    (a 2-D one as a list of rows)."""
    if isinstance(v, dict):
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"])
        if "shape" in v:
            a = a.reshape([int(x) for x in str(v["shape"]).split(",")])
        return a.tolist()
    return list(v)
