"""Training loops and optimisers shared by all estimators."""

from neuralgp.train.loop import TrainLog, train
from neuralgp.train.optim import adam

__all__ = ["TrainLog", "train", "adam"]
