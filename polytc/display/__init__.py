"""Rich (HTML) display of the compiler's stages in Jupyter.

``wrap(stages)`` turns the dict stage name -> text of a ``CompiledKernel`` into one of
``str`` subclasses that render themselves (``_repr_html_``) while staying the same text
for comparisons, printing and JSON; ``stages_html(stages)`` renders them all as
collapsible sections; ``session_html(session)`` draws an ONNX session's graph with its
fusion groups.
"""
from __future__ import annotations

from .graph import session_html
from .stages import (CodeStage, DecisionStage, DependenceStage, ScheduleStage, ScopStage,
                     TcStage, TextStage, stage, stages_html, wrap)

__all__ = ["CodeStage", "DecisionStage", "DependenceStage", "ScheduleStage", "ScopStage",
           "TcStage", "TextStage", "session_html", "stage", "stages_html", "wrap"]
