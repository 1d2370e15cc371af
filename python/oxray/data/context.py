"""`DataContext`: the settings of dataset executions in this process, with Ray Data's names."""

import threading
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class ExecutionResources:
    cpu: Optional[float] = None
    gpu: Optional[float] = None
    object_store_memory: Optional[float] = None


@dataclass
class ExecutionOptions:
    resource_limits: ExecutionResources = field(default_factory=ExecutionResources)
    exclude_resources: ExecutionResources = field(default_factory=ExecutionResources)
    preserve_order: bool = True  # outputs always come in input order here
    locality_with_output: bool = False
    verbose_progress: bool = False


@dataclass
class DataContext:
    execution_options: ExecutionOptions = field(default_factory=ExecutionOptions)
    enable_progress_bars: bool = True
    read_op_min_num_blocks: int = 200
    target_max_block_size: int = 128 * 1024 * 1024
    object_store_memory_limit_fraction: float = 0.5
    # Where data tasks and pool actors go unless their remote args say: spread over the
    # nodes with room, so a node whose CPUs a trainer holds does not stall the reads.
    scheduling_strategy: Any = "SPREAD"

    _current = None
    _lock = threading.Lock()

    @staticmethod
    def get_current() -> "DataContext":
        with DataContext._lock:
            if DataContext._current is None:
                DataContext._current = DataContext()
            return DataContext._current

    def budget_bytes(self) -> Optional[int]:
        """Bytes of blocks an execution may hold in the object store at once."""
        limit = self.execution_options.resource_limits.object_store_memory
        if limit is not None:
            return int(limit)
        import oxray

        store = float(oxray.cluster_resources().get("object_store_memory", 0))
        return int(store * self.object_store_memory_limit_fraction) if store > 0 else None
