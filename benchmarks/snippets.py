"""BASELINES ONLY: the pooling snippets users copy today, re-implemented in their published form.

These exist for the benchmarks to beat, never to be used: they carry the bugs poolkit fixes (a -1e4 fill
that a real value can lose to, masks ignored, an LSTM's backward half read after one step, a
stack of every layer at every position to keep one). They follow the widely copied Kaggle CommonLit /
Feedback Prize code, notably "Utilizing Transformer Representations Efficiently" (Rhtsingh, 2021):
same operations in the same order, written from their published form for the comparison (poolkit's own
implementations share no code with them).

Where the notebook stacks the hidden states before calling the pooler (``all_hidden_states =
torch.stack(outputs[2])``), the snippet's callable here does so too: that copy is part of what users run.
"""

from __future__ import annotations

import torch
from torch import nn


class MeanPooling(nn.Module):
    """Masked mean: multiply by the expanded float mask, sum, divide by the clamped count."""

    def forward(self, last_hidden_state, attention_mask):
        input_mask_expanded = attention_mask.unsqueeze(-1).expand(last_hidden_state.size()).float()
        sum_embeddings = torch.sum(last_hidden_state * input_mask_expanded, 1)
        sum_mask = input_mask_expanded.sum(1)
        sum_mask = torch.clamp(sum_mask, min=1e-9)
        return sum_embeddings / sum_mask


class MaxPooling(nn.Module):
    """Masked max: clone, write -1e4 at padded positions, max over tokens."""

    def forward(self, last_hidden_state, attention_mask):
        input_mask_expanded = attention_mask.unsqueeze(-1).expand(last_hidden_state.size()).float()
        embeddings = last_hidden_state.clone()
        embeddings[input_mask_expanded == 0] = -1e4
        max_embeddings, _ = torch.max(embeddings, dim=1)
        return max_embeddings


class AttentionPooling(nn.Module):
    """Learned Attention Pooling: Linear(D, 512) -> Tanh -> Linear(512, 1), -inf at padding, softmax, sum."""

    def __init__(self, in_dim: int, hidden_dim: int = 512):
        super().__init__()
        self.attention = nn.Sequential(nn.Linear(in_dim, hidden_dim), nn.Tanh(), nn.Linear(hidden_dim, 1))

    def forward(self, last_hidden_state, attention_mask):
        w = self.attention(last_hidden_state).float()
        w[attention_mask == 0] = float("-inf")
        w = torch.softmax(w, 1)
        return torch.sum(w * last_hidden_state, dim=1)


class AttentionHead(nn.Module):
    """Attention Head: W = Linear(D, hidden), V = Linear(hidden, 1), tanh, softmax over tokens (no mask)."""

    def __init__(self, in_features: int, hidden_dim: int):
        super().__init__()
        self.in_features = in_features
        self.middle_features = hidden_dim
        self.W = nn.Linear(in_features, hidden_dim)
        self.V = nn.Linear(hidden_dim, 1)
        self.out_features = hidden_dim

    def forward(self, features):
        att = torch.tanh(self.W(features))
        score = self.V(att)
        attention_weights = torch.softmax(score, dim=1)
        context_vector = attention_weights * features
        return torch.sum(context_vector, dim=1)


class WeightedLayerPooling(nn.Module):
    """One weight per layer from layer_start: expand the weights to the stack's size, weighted sum, / sum."""

    def __init__(self, num_hidden_layers: int, layer_start: int = 4, layer_weights=None):
        super().__init__()
        self.layer_start = layer_start
        self.num_hidden_layers = num_hidden_layers
        self.layer_weights = layer_weights if layer_weights is not None else nn.Parameter(
            torch.tensor([1] * (num_hidden_layers + 1 - layer_start), dtype=torch.float))

    def forward(self, all_hidden_states):
        all_layer_embedding = all_hidden_states[self.layer_start:, :, :, :]
        weight_factor = self.layer_weights.unsqueeze(-1).unsqueeze(-1).unsqueeze(-1).expand(
            all_layer_embedding.size())
        return (weight_factor * all_layer_embedding).sum(dim=0) / self.layer_weights.sum()


class LSTMPooling(nn.Module):
    """Each layer's first token stacked on the last dim, viewed as (B, L, D), LSTM, dropout(out[:, -1])."""

    def __init__(self, num_layers: int, hidden_size: int, hiddendim_lstm: int = 256):
        super().__init__()
        self.num_hidden_layers = num_layers
        self.hidden_size = hidden_size
        self.hiddendim_lstm = hiddendim_lstm
        self.lstm = nn.LSTM(self.hidden_size, self.hiddendim_lstm, batch_first=True)
        self.dropout = nn.Dropout(0.1)

    def forward(self, all_hidden_states):
        hidden_states = torch.stack([all_hidden_states[layer_i][:, 0].squeeze()
                                     for layer_i in range(1, self.num_hidden_layers + 1)], dim=-1)
        hidden_states = hidden_states.view(-1, self.num_hidden_layers, self.hidden_size)
        out, _ = self.lstm(hidden_states, None)
        return self.dropout(out[:, -1, :])


# -- the snippets as users call them -----------------------------------------------------------------
def weighted_layer_cls(pooler: WeightedLayerPooling, hidden_states) -> torch.Tensor:
    """``torch.stack(outputs.hidden_states)``, the pooler, then ``[:, 0]`` (the notebook's usage)."""
    return pooler(torch.stack(hidden_states))[:, 0]


def lstm_over_layers(pooler: LSTMPooling, hidden_states) -> torch.Tensor:
    """``torch.stack(outputs.hidden_states)`` then the pooler (the notebook's usage)."""
    return pooler(torch.stack(hidden_states))
