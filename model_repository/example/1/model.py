"""A fixed-weight MLP, 4 -> 8 (ReLU) -> 3 (softmax), served by Triton's python backend.

The weights are derived from a seed, so a client can import ``forward`` from this file
and check the server's answer.
"""

import json

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton, to compute expected outputs
    pb_utils = None


def weights():
    rng = np.random.default_rng(20261202)
    w1 = rng.standard_normal((4, 8)).astype(np.float32)
    b1 = rng.standard_normal(8).astype(np.float32)
    w2 = rng.standard_normal((8, 3)).astype(np.float32)
    b2 = rng.standard_normal(3).astype(np.float32)
    return w1, b1, w2, b2


def forward(x):
    w1, b1, w2, b2 = weights()
    h = np.maximum(x @ w1 + b1, 0.0)
    z = h @ w2 + b2
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


class TritonPythonModel:
    def initialize(self, args):
        self.config = json.loads(args["model_config"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT__0").as_numpy()
            y = forward(x.astype(np.float32))
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT__0", y)]))
        return responses
