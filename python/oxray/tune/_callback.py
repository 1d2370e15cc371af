"""`Callback`: hooks on the run's events, called in the driver."""


class Callback:
    def setup(self, **info) -> None:
        pass

    def on_trial_start(self, iteration: int, trials: list, trial, **info) -> None:
        pass

    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info) -> None:
        pass

    def on_trial_complete(self, iteration: int, trials: list, trial, **info) -> None:
        pass

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        pass

    def on_experiment_end(self, trials: list, **info) -> None:
        pass
