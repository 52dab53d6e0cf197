-- Why did costs spike? The processing starts in the day partitions from ? ('yyyy/MM/dd',
-- the window's first day: Athena reads no other) since ? (Unix seconds), grouped by the full
-- identity (the job key hashes it: a long video's parts differ by their range) and by
-- asset, classified into the four causes that all look like "the same photo ran twice"
-- (domain/decisions.py CAUSES). One row per group and cause; the differing field's least
-- and greatest values are the evidence.
WITH starts AS (
  SELECT * FROM decisions WHERE day >= ? AND t >= ? AND action IN ('process', 'takeover')
),
by_identity AS (
  SELECT job, content, recipe, recipe_v, recipe_hash, policy, key_v,
         min(asset) AS asset,
         sum(CASE WHEN action = 'process' THEN 1 ELSE 0 END) AS processed,
         count(*) AS starts,
         count(DISTINCT corr) AS correlations
  FROM starts
  GROUP BY job, content, recipe, recipe_v, recipe_hash, policy, key_v
),
by_asset AS (
  SELECT asset, recipe, recipe_v,
         count(*) AS starts,
         count(DISTINCT content) AS contents, min(content) AS content_a, max(content) AS content_b,
         count(DISTINCT recipe_hash) AS hashes, min(recipe_hash) AS hash_a, max(recipe_hash) AS hash_b,
         count(DISTINCT policy) AS policies, min(policy) AS policy_a, max(policy) AS policy_b
  FROM starts
  GROUP BY asset, recipe, recipe_v
  HAVING count(*) > 1
)
SELECT 'claim_boundary' AS cause, asset, recipe, recipe_v, processed AS starts,
       'correlations' AS differing, CAST(correlations AS VARCHAR) AS least, content AS greatest
FROM by_identity WHERE processed > 1
UNION ALL
SELECT 'same_key_different_bytes', asset, recipe, recipe_v, starts, 'content', content_a, content_b
FROM by_asset WHERE contents > 1
UNION ALL
SELECT 'recipe_changed_without_version', asset, recipe, recipe_v, starts, 'recipe_hash', hash_a, hash_b
FROM by_asset WHERE hashes > 1
UNION ALL
SELECT 'policy_change', asset, recipe, recipe_v, starts, 'policy', policy_a, policy_b
FROM by_asset WHERE policies > 1
ORDER BY cause, asset, recipe, recipe_v
