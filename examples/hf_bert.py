"""A Hugging Face BERT-base, random-initialised from its config: nothing is downloaded.

Its three inputs go to forward() by keyword, as Hugging Face takes them, and its outputs
keep the names of the ModelOutput forward() returns (last_hidden_state, pooler_output):

    tritonkit export examples/hf_bert.py:build --name bert --repository model_repository
    tritonkit loadtest --model bert --concurrency 1,4 --shape input_ids:128 \\
        --shape attention_mask:128 --shape token_type_ids:128

Needs transformers (pip install 'transformers>=4.57,<5'). For a trained model, build it
with BertModel.from_pretrained(...) instead; the rest is the same.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import BertConfig, BertModel  # noqa: E402

SEQUENCE = 16


def build():
    """BERT-base (bert-base-uncased's shape), example token ids, mask and segment ids."""
    torch.manual_seed(0)
    config = BertConfig()                   # 12 layers, 768 wide, 30522 tokens
    ids = torch.randint(0, config.vocab_size, (2, SEQUENCE))
    mask = torch.ones(2, SEQUENCE, dtype=torch.int64)
    mask[1, SEQUENCE * 3 // 4:] = 0         # the second sentence is padded
    segments = torch.zeros(2, SEQUENCE, dtype=torch.int64)
    segments[:, SEQUENCE // 2:] = 1         # a sentence pair
    inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": segments}
    # The sequence axis varies with the text; the batch always does.
    return BertModel(config).eval(), inputs, {name: {1: "sequence"} for name in inputs}
