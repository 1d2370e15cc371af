"""A worker process: the node agent starts it with `python -m oxray._private.worker_main`;
it runs the tasks pushed to it one at a time. Once it received an actor's creation call, it
is that actor."""

import os
import sys

from oxray import _native
from oxray._private import serialization
from oxray.exceptions import ActorDiedError


def main() -> None:
    executor = _native.TaskExecutor(os.environ["OXRAY_AGENT_ADDRESS"], os.environ["OXRAY_WORKER_ID"],
                                    os.environ["OXRAY_AUTH_TOKEN"])
    functions = {}
    actor = None
    creation_error = None
    while True:
        task = executor.next_task()
        if task is None:
            return
        task_id, name, function, args, dependencies, actor_creation, actor_method = task
        try:
            values = {object_id: serialization.loads(data) for object_id, data in dependencies}
            call_args, call_kwargs = serialization.loads_args(args, values)
            if actor_creation:
                try:
                    actor = serialization.loads(function)(*call_args, **call_kwargs)
                except BaseException as error:
                    creation_error = error
                    raise
                result = None
            elif actor_method:
                if actor is None:
                    raise ActorDiedError(f"the actor could not be created: {creation_error!r}")
                result = getattr(actor, actor_method)(*call_args, **call_kwargs)
            else:
                fn = functions.get(function)
                if fn is None:
                    fn = functions[function] = serialization.loads(function)
                result = fn(*call_args, **call_kwargs)
            executor.finish(task_id, serialization.dumps(result), False)
        except BaseException as error:  # the task's failure is its result
            executor.finish(task_id, serialization.dumps_error(name, error), True)
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    main()
