"""vgp-train's config: the declarations of its keys, their rules and effects, and the checks
made once per start."""
