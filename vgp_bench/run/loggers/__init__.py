"""Where a run's scalars, test result and figures go besides its folder: the `logger` group
(configs/logger/: tensorboard, csv, mlflow), behind one small interface (`RunLogger`)."""

from vgp_bench.run.loggers.base import Loggers, RunLogger
from vgp_bench.run.loggers.build import LOGGER_NAMES, build_loggers, check_logger_choice

__all__ = ["LOGGER_NAMES", "Loggers", "RunLogger", "build_loggers", "check_logger_choice"]
