"""Ray's `ray.util` names that oxray provides."""
