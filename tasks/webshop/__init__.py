"""WebShop (level 3): a text-mode simulator of the WebShop site, graded by rollouts."""
