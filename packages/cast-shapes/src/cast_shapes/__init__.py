"""cast-shapes: the shapes world: a miniature compositional world, its exact oracle scorer and a tiny pretrained policy."""
