"""Ray's `accelerator_type` option (tasks, actors, Train's ScalingConfig, Serve's and Data's
actor options): a node of a GPU model has the resource `accelerator_type:<model>` (as
`oxray start --resources '{"accelerator_type:A100": 1}'` declares it), and work that asks
for the model asks for a sliver of it, as Ray does: the sliver only picks the node, so any
number of tasks fit there."""

from typing import Dict, Optional

PREFIX = "accelerator_type:"
AMOUNT = 0.001


def check(value) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(f"accelerator_type must be a string such as 'A100', got {type(value).__name__}")
    if not value.strip():
        raise ValueError("accelerator_type must name an accelerator, such as 'A100', not be empty")


def resource(accelerator_type: Optional[str]) -> Dict[str, float]:
    """The resource that asks for a node of that accelerator type (none for None)."""
    check(accelerator_type)
    return {} if accelerator_type is None else {PREFIX + accelerator_type: AMOUNT}
