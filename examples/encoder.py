"""A transformer encoder on int64 token ids plus an attention mask (two inputs, two dtypes).

Both inputs have a dynamic sequence axis besides the batch; the factory says so in its
third return value. A load test gives that axis a size (up to 128, the position table):

    tritonkit export examples/encoder.py:build --name encoder --repository model_repository
    tritonkit loadtest --model encoder --concurrency 4 --shape input_ids:128 --shape attention_mask:128
"""

import torch
from torch import nn

VOCAB, WIDTH, SEQ = 1000, 32, 12


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.position = nn.Embedding(128, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, nhead=4, dim_feedforward=64, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        hidden = self.embed(input_ids) + self.position(positions)
        # An additive float mask (as Hugging Face models use): a row with every token
        # masked stays finite instead of turning into NaN.
        padding = (1.0 - attention_mask.to(hidden.dtype)) * -1e4
        hidden = self.encoder(hidden, src_key_padding_mask=padding)
        return self.head(hidden[:, 0])


def build():
    """Return the model, named example inputs and the dynamic sequence axis of both."""
    torch.manual_seed(0)
    ids = torch.randint(0, VOCAB, (2, SEQ))
    mask = torch.ones(2, SEQ, dtype=torch.int64)
    mask[1, SEQ // 2:] = 0
    dynamic = {"input_ids": {1: "sequence"}, "attention_mask": {1: "sequence"}}
    return Encoder().eval(), {"input_ids": ids, "attention_mask": mask}, dynamic
