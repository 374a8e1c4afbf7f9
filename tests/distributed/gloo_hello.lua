-- tests/distributed/gloo_hello.lua - joins the world (backend EMBER_TEST_BACKEND or 'auto', timeout
-- from EMBER_DIST_TIMEOUT) and makes one all_reduce: the start-up cases of
-- tests/distributed/gloo_failures.py.
local dist = ember.dist
dist.init { backend = os.getenv('EMBER_TEST_BACKEND') or 'auto' }
local t = ember.ones(3) * (dist.rank() + 1)
dist.all_reduce(t)
local W = dist.world_size()
assert(t:sum():item() == 3 * W * (W + 1) / 2, 'wrong sum')
print(string.format('rank %d of %d: backend %s, all_reduce ok', dist.rank(), W, dist.backend()))
