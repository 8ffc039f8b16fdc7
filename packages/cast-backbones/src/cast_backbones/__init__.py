"""cast-backbones: policies for real models: flux2, flux2-klein, qwen-image (diffusers)."""
