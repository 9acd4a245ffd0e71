"""Hardware profiles: schema, loading, and the measured tables shipped beside them."""

from laddersim.hardware.profile import HardwareProfile, list_profiles, load_profile, profiles_dir

__all__ = ["HardwareProfile", "list_profiles", "load_profile", "profiles_dir"]
