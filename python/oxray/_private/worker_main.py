"""A worker process: the node agent starts it with `python -m oxray._private.worker_main`;
it runs the tasks drivers push to it, one at a time."""

import os
import sys

from oxray import _native
from oxray._private import serialization


def main() -> None:
    executor = _native.TaskExecutor(os.environ["OXRAY_AGENT_ADDRESS"], os.environ["OXRAY_WORKER_ID"],
                                    os.environ["OXRAY_AUTH_TOKEN"])
    functions = {}
    while True:
        task = executor.next_task()
        if task is None:
            return
        task_id, name, function, args, dependencies = task
        try:
            fn = functions.get(function)
            if fn is None:
                fn = functions[function] = serialization.loads(function)
            values = {object_id: serialization.loads(data) for object_id, data in dependencies}
            call_args, call_kwargs = serialization.loads_args(args, values)
            result = fn(*call_args, **call_kwargs)
            executor.finish(task_id, serialization.dumps(result), False)
        except BaseException as error:  # the task's failure is its result
            executor.finish(task_id, serialization.dumps_error(name, error), True)
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    main()
