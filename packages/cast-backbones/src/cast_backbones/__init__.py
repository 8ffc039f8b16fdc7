"""cast-backbones: policies for real models: flux2, flux2-klein, qwen-image (diffusers)."""


def policy_classes() -> dict:
    """Registry name -> policy class (imports diffusers; the plugin module itself stays light)."""
    from cast_backbones.flux2 import Flux2KleinPolicy, Flux2Policy
    from cast_backbones.qwen_image import QwenImagePolicy

    return {cls.name: cls for cls in (Flux2Policy, Flux2KleinPolicy, QwenImagePolicy)}
