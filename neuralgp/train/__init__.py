"""Training loops and optimisers shared by all estimators."""

from neuralgp.train.loop import TrainLog, compiled, minibatch_epoch, steps_per_epoch, train
from neuralgp.train.optim import adam
from neuralgp.train.subsets import training_subsets

__all__ = ["TrainLog", "train", "minibatch_epoch", "steps_per_epoch", "compiled", "adam", "training_subsets"]
