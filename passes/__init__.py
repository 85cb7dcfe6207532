"""irad's graph passes (installed as irad.passes)."""
