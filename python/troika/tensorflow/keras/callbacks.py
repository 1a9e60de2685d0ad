"""``horovod.tensorflow.keras.callbacks``: troika.keras.callbacks's callbacks."""

from troika.keras.callbacks import (BroadcastGlobalVariablesCallback, MetricAverageCallback,
                                    LearningRateScheduleCallback, LearningRateWarmupCallback,
                                    BestModelCheckpoint)

__all__ = ["BroadcastGlobalVariablesCallback", "MetricAverageCallback",
           "LearningRateScheduleCallback", "LearningRateWarmupCallback", "BestModelCheckpoint"]
