-- The identities that spent the most CPU in the day partitions from ? ('yyyy/MM/dd') since
-- ? (Unix seconds): every ended run's CPU seconds summed by the full identity, the 10 greatest.
SELECT job, content, recipe, recipe_v, recipe_hash, policy, key_v,
       count(*) AS renders,
       sum(cpu_s) AS cpu_s,
       sum(bytes_out) AS bytes_out
FROM decisions
WHERE day >= ? AND t >= ? AND action = 'ended' AND cpu_s IS NOT NULL
GROUP BY job, content, recipe, recipe_v, recipe_hash, policy, key_v
ORDER BY cpu_s DESC, content, recipe
LIMIT 10
