"""`ray.types`: the names Ray's type annotations use. `ObjectRef[T]` is oxray's ObjectRef
itself (Ray's is a stand-in class), so `isinstance(ref, ObjectRef)` holds for real refs."""

from oxray.object_ref import ObjectRef

__all__ = ["ObjectRef"]
