"""The update's objectives, one per module: ``sde-clipped`` (Flow-GRPO / CAST, the clipped ratio of
SDE-window log-probs), ``nft`` (DiffusionNFT) and ``awm`` (advantage-weighted matching). Each
takes the projector's advantages as they come — a scalar per sample or CAST's per-position map.
A plugin adds its own with the ``register_objectives`` hook (docs/plugins.md)."""

__all__ = ["SDEClipped", "NFT", "AWM", "OldPolicy"]


def __getattr__(name: str):  # cheap package import: torch loads with the first objective used
    if name == "SDEClipped":
        from cast_core.objectives.sde_clipped import SDEClipped

        return SDEClipped
    if name == "NFT":
        from cast_core.objectives.nft import NFT

        return NFT
    if name == "AWM":
        from cast_core.objectives.awm import AWM

        return AWM
    if name == "OldPolicy":
        from cast_core.objectives.old_policy import OldPolicy

        return OldPolicy
    raise AttributeError(name)
