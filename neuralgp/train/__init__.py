"""Training loops shared by all estimators."""

from neuralgp.train.loop import TrainLog, train

__all__ = ["TrainLog", "train"]
