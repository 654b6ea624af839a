"""Explanations of what a pooler looks at (words, layers, heads), their faithfulness, and self-contained HTML
reports (extra: report)."""

from .explainer import Explainer, Explanation, TextExplanation, explain
from .faithfulness import deletion_curve

__all__ = ["Explainer", "Explanation", "TextExplanation", "deletion_curve", "explain"]
