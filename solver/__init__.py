"""From an instance to a verified plan: loading, bounds, candidates, selection, `solve()`.

The public names are re-exported by the top-level package (`from lambdadnn import solve`); this
package imports nothing itself, so its light modules (errors, shipped data) load alone.
"""
