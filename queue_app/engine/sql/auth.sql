-- Authentication reads (api/auth_failures.py).

-- name: token_user_with_permissions
-- A token's user row, the token's own columns and the user's permissions in one
-- statement: the two sets ModelBackend reads with a query each (the user's and
-- their groups'), named as it names them ("app_label.codename"). The tables are
-- Django's own user model's and DRF's token model's; with other models the
-- caller lets DRF look the token up instead.
SELECT auth_user.*, authtoken_token.key AS token_key, authtoken_token.created AS token_created,
       ARRAY(
           SELECT ct.app_label || '.' || p.codename
             FROM auth_permission p
             JOIN django_content_type ct ON ct.id = p.content_type_id
            WHERE p.id IN (
                SELECT up.permission_id
                  FROM auth_user_user_permissions up
                 WHERE up.user_id = auth_user.id
                UNION ALL
                SELECT gp.permission_id
                  FROM auth_group_permissions gp
                  JOIN auth_user_groups ug ON ug.group_id = gp.group_id
                 WHERE ug.user_id = auth_user.id
            )
       ) AS permission_names
  FROM authtoken_token JOIN auth_user ON auth_user.id = authtoken_token.user_id
 WHERE authtoken_token.key = %(key)s
