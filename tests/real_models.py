"""The architectures people serve, random-initialised from configs: no weights downloaded.

Each factory returns ``(module, example_inputs[, dynamic_axes])`` as a ``tritonkit export
SPEC`` factory does, so ``tritonkit export tests/real_models.py:bert_base`` works as it is.
With no arguments a factory builds the full-size model; keyword arguments shrink it for
quick tests (``bert_base(layers=2, hidden=64)``, ``resnet50(image=64)``); ``bert_small``
and ``gpt2_2layer`` are such sizes for a SPEC.

    bert_base        BertModel: input_ids, attention_mask, token_type_ids; dynamic sequence
    distilbert_cls   DistilBertForSequenceClassification: input_ids, attention_mask
    gpt2             GPT2LMHeadModel with its attention mask, dynamic sequence (no KV cache)
    t5_encoder       T5EncoderModel: input_ids, attention_mask; dynamic sequence
    vit              ViTForImageClassification, ViT-Tiny's shape (192 wide, 12 layers)
    resnet50         torchvision's ResNet-50 layout, written out here
    mobilenet_v3     torchvision's MobileNetV3-Large layout, written out here

torchvision's own wheel does not import on this machine's CPU torch build, so the two
CNNs follow its layouts (blocks, widths, strides, initialisation) in plain torch.nn.
Hugging Face's hub is kept offline: a factory never reaches for a download.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

BATCH = 2
SEQUENCE = 16
SEQUENCE_AXES = {1: "sequence"}


def _tokens(vocab: int, batch: int, sequence: int, *, token_types: bool = False) -> dict:
    """Token ids, an attention mask padding the second row's tail, and (BERT) segment ids."""
    inputs = {"input_ids": torch.randint(0, vocab, (batch, sequence)),
              "attention_mask": torch.ones(batch, sequence, dtype=torch.int64)}
    if batch > 1:
        inputs["attention_mask"][1, sequence * 3 // 4:] = 0
    if token_types:
        inputs["token_type_ids"] = torch.zeros(batch, sequence, dtype=torch.int64)
        inputs["token_type_ids"][:, sequence // 2:] = 1
    return inputs


def _dynamic_sequence(inputs: dict) -> dict:
    return {name: dict(SEQUENCE_AXES) for name in inputs}


# Hugging Face ----------------------------------------------------------------------------

def bert_base(*, layers: int = 12, hidden: int = 768, heads: int = 12, batch: int = BATCH,
              sequence: int = SEQUENCE):
    """BERT-base (110M parameters): last_hidden_state and pooler_output."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                        intermediate_size=4 * hidden)
    inputs = _tokens(config.vocab_size, batch, sequence, token_types=True)
    return BertModel(config).eval(), inputs, _dynamic_sequence(inputs)


def distilbert_cls(*, layers: int = 6, hidden: int = 768, heads: int = 12, labels: int = 2,
                   batch: int = BATCH, sequence: int = SEQUENCE):
    """DistilBERT for sequence classification (66M parameters): logits."""
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    torch.manual_seed(0)
    config = DistilBertConfig(n_layers=layers, dim=hidden, n_heads=heads, hidden_dim=4 * hidden,
                              num_labels=labels)
    inputs = _tokens(config.vocab_size, batch, sequence)
    return DistilBertForSequenceClassification(config).eval(), inputs, _dynamic_sequence(inputs)


def gpt2(*, layers: int = 12, hidden: int = 768, heads: int = 12, batch: int = BATCH,
         sequence: int = SEQUENCE):
    """GPT-2 (124M parameters at 12 layers) with its attention mask: logits.

    ``use_cache=False``: a served GPT-2 without past key/value inputs gains nothing from
    returning them (24 extra outputs at full size).
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, use_cache=False)
    inputs = _tokens(config.vocab_size, batch, sequence)
    return GPT2LMHeadModel(config).eval(), inputs, _dynamic_sequence(inputs)


def llama_small():
    """LLaMA's architecture at a quick size (1 layer, 32 wide, grouped-query attention): its
    causal mask is made under torch.vmap (transformers' masking_utils)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=64, vocab_size=128,
                         max_position_embeddings=64, use_cache=False)
    inputs = _tokens(config.vocab_size, BATCH, SEQUENCE)
    return LlamaForCausalLM(config).eval(), inputs, _dynamic_sequence(inputs)


def bert_small():
    """BERT's architecture at a quick size (2 layers, 64 wide): for ``tritonkit export SPEC``."""
    return bert_base(layers=2, hidden=64, heads=4)


def gpt2_2layer():
    """GPT-2 at full width with 2 of its 12 layers (a quicker export of the same blocks)."""
    return gpt2(layers=2)


def t5_encoder(*, layers: int = 6, hidden: int = 512, heads: int = 8, batch: int = BATCH,
               sequence: int = SEQUENCE):
    """T5-small's encoder (35M parameters): last_hidden_state."""
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(0)
    config = T5Config(num_layers=layers, d_model=hidden, num_heads=heads, d_kv=hidden // heads,
                      d_ff=4 * hidden)
    inputs = _tokens(config.vocab_size, batch, sequence)
    return T5EncoderModel(config).eval(), inputs, _dynamic_sequence(inputs)


def vit(*, layers: int = 12, hidden: int = 192, heads: int = 3, image: int = 224,
        patch: int = 16, labels: int = 1000, batch: int = BATCH):
    """A small ViT (ViT-Tiny's shape, 5.7M parameters) for image classification: logits."""
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                       intermediate_size=4 * hidden, image_size=image, patch_size=patch,
                       num_labels=labels)
    return ViTForImageClassification(config).eval(), {"pixel_values": _images(batch, image)}


def _images(batch: int, image: int) -> torch.Tensor:
    return torch.randn(batch, 3, image, image)


# torchvision's layouts -------------------------------------------------------------------

class Bottleneck(nn.Module):
    """torchvision's ResNet Bottleneck (v1.5: the stride on the 3x3 conv)."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != planes * self.expansion:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes * self.expansion, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * self.expansion))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet with Bottleneck blocks ([3, 4, 6, 3] is ResNet-50)."""

    def __init__(self, blocks: tuple[int, ...] = (3, 4, 6, 3), classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        inplanes = 64
        stages = []
        for index, count in enumerate(blocks):
            planes = 64 * 2 ** index
            stage = []
            for block in range(count):
                stage.append(Bottleneck(inplanes, planes, stride=2 if index and not block else 1))
                inplanes = planes * Bottleneck.expansion
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(inplanes, classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50(*, image: int = 224, batch: int = BATCH):
    """ResNet-50 (25.6M parameters): logits over 1000 classes."""
    torch.manual_seed(0)
    return ResNet().eval(), _images(batch, image)


def _divisible(value: float, divisor: int = 8) -> int:
    """torchvision's _make_divisible: channels rounded to a multiple of 8, never 10 % below."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _conv_bn_act(inputs: int, outputs: int, kernel: int, stride: int = 1, groups: int = 1,
                 activation: type[nn.Module] | None = nn.Hardswish) -> nn.Sequential:
    """torchvision's Conv2dNormActivation as MobileNetV3 uses it (BN eps 0.001)."""
    layers: list[nn.Module] = [
        nn.Conv2d(inputs, outputs, kernel, stride=stride, padding=(kernel - 1) // 2,
                  groups=groups, bias=False),
        nn.BatchNorm2d(outputs, eps=0.001, momentum=0.01)]
    if activation is not None:
        layers.append(activation(inplace=True))
    return nn.Sequential(*layers)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeezed: int) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)
        self.activation = nn.ReLU()
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.fc2(self.activation(self.fc1(self.avgpool(x))))
        return self.scale_activation(scale) * x


class InvertedResidual(nn.Module):
    """MobileNetV3's block: expand 1x1, depthwise kxk, squeeze-excite, project 1x1."""

    def __init__(self, inputs: int, kernel: int, expanded: int, outputs: int, se: bool,
                 activation: type[nn.Module], stride: int) -> None:
        super().__init__()
        self.use_res_connect = stride == 1 and inputs == outputs
        layers: list[nn.Module] = []
        if expanded != inputs:
            layers.append(_conv_bn_act(inputs, expanded, 1, activation=activation))
        layers.append(_conv_bn_act(expanded, expanded, kernel, stride=stride, groups=expanded,
                                   activation=activation))
        if se:
            layers.append(SqueezeExcitation(expanded, _divisible(expanded // 4)))
        layers.append(_conv_bn_act(expanded, outputs, 1, activation=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return out + x if self.use_res_connect else out


# torchvision's mobilenet_v3_large settings: (in, kernel, expanded, out, SE, activation, stride)
_RE, _HS = nn.ReLU, nn.Hardswish
MOBILENET_V3_LARGE = (
    (16, 3, 16, 16, False, _RE, 1), (16, 3, 64, 24, False, _RE, 2),
    (24, 3, 72, 24, False, _RE, 1), (24, 5, 72, 40, True, _RE, 2),
    (40, 5, 120, 40, True, _RE, 1), (40, 5, 120, 40, True, _RE, 1),
    (40, 3, 240, 80, False, _HS, 2), (80, 3, 200, 80, False, _HS, 1),
    (80, 3, 184, 80, False, _HS, 1), (80, 3, 184, 80, False, _HS, 1),
    (80, 3, 480, 112, True, _HS, 1), (112, 3, 672, 112, True, _HS, 1),
    (112, 5, 672, 160, True, _HS, 2), (160, 5, 960, 160, True, _HS, 1),
    (160, 5, 960, 160, True, _HS, 1),
)


class MobileNetV3(nn.Module):
    """torchvision's MobileNetV3-Large (5.5M parameters)."""

    def __init__(self, classes: int = 1000, last_channel: int = 1280) -> None:
        super().__init__()
        layers = [_conv_bn_act(3, MOBILENET_V3_LARGE[0][0], 3, stride=2)]
        layers += [InvertedResidual(*setting) for setting in MOBILENET_V3_LARGE]
        last = MOBILENET_V3_LARGE[-1][3]
        layers.append(_conv_bn_act(last, 6 * last, 1))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(6 * last, last_channel), nn.Hardswish(inplace=True),
                                        nn.Dropout(p=0.2, inplace=True),
                                        nn.Linear(last_channel, classes))
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0, 0.01)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(self.avgpool(self.features(x)), 1)
        return self.classifier(x)


def mobilenet_v3(*, image: int = 224, batch: int = BATCH):
    """MobileNetV3-Large: logits over 1000 classes."""
    torch.manual_seed(0)
    return MobileNetV3().eval(), _images(batch, image)


FULL_SIZE = {"bert_base": bert_base, "distilbert_cls": distilbert_cls, "gpt2": gpt2,
             "t5_encoder": t5_encoder, "vit": vit, "resnet50": resnet50,
             "mobilenet_v3": mobilenet_v3}
