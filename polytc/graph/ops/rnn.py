"""Recurrent layers: LSTM, GRU, RNN."""
from __future__ import annotations

from . import op  # noqa: F401
