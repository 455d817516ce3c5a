"""Triton python-backend model that serves an ONNX model with ONNX Runtime in-process.

The embedded local tritonserver has no ONNX Runtime backend, so ``tritonkit deploy
--target local`` serves each ``onnxruntime_onnx`` model through this file (copied as
``<model>/1/model.py`` of the local repository). It keeps the production config's
inputs, outputs, batching and warm-up; a dynamic batch of requests is run as one
ONNX Runtime call, like the real backend does.
"""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        path = os.path.join(args["model_repository"], args["model_version"],
                            params.get("onnx_model", "model.onnx"))
        options = ort.SessionOptions()
        # ONNX Runtime's threads spin-wait between ops by default, burning CPU that the
        # server's own threads (and a load generator on the same host) need: they wait
        # without spinning.
        threads = int(params.get("intra_op_threads", "0"))
        if threads:
            options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(path, sess_options=options,
                                            providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]
        self.batching = int(config.get("max_batch_size", 0)) > 0

    def execute(self, requests):
        feeds = [{name: pb_utils.get_input_tensor_by_name(r, name).as_numpy()
                  for name in self.inputs} for r in requests]
        results = [None] * len(requests)
        for group in self._groups(feeds):
            if len(group) == 1 or not self.batching:
                for index in group:
                    results[index] = self.session.run(self.outputs, feeds[index])
                continue
            sizes = [feeds[i][self.inputs[0]].shape[0] for i in group]
            batched = {name: np.concatenate([feeds[i][name] for i in group])
                       for name in self.inputs}
            outputs = self.session.run(self.outputs, batched)
            parts = [np.split(out, np.cumsum(sizes)[:-1]) for out in outputs]
            for slot, index in enumerate(group):
                results[index] = [part[slot] for part in parts]
        return [pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor(name, np.ascontiguousarray(value))
                    for name, value in zip(self.outputs, outs)])
                for outs in results]

    def _groups(self, feeds):
        """Requests whose non-batch shapes match can run as one batch."""
        groups = {}
        for index, feed in enumerate(feeds):
            key = tuple((name, feed[name].shape[1:], feed[name].dtype.str) for name in self.inputs)
            groups.setdefault(key, []).append(index)
        return list(groups.values())
