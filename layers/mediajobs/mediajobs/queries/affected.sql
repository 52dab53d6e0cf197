-- What was decided under policy ? (its version, as the keys carry it): every asset a
-- moderation outcome or a review named, with its latest outcome, and every album whose
-- promo was made under it (recipe 'promo', its asset the album prefix's hash) -- what a new
-- policy's backfill regenerates.
SELECT asset, content, recipe, max(t) AS decided_at,
       max_by(action, t) AS outcome
FROM decisions
WHERE policy = CAST(? AS VARCHAR) AND action IN ('accepted', 'rejected', 'review')
GROUP BY asset, content, recipe
ORDER BY asset, recipe
