"""The web console's pages, a module each: sign-in (auth), overview, keys, usage (and its CSV), the
image and chat playgrounds, the OAuth applications and the stored responses; base holds what every
page shares.

Views are thin: they read through console.queries, write through the owning app's services
(keys.services) and run playground calls through the image and text pipelines, so a playground call is
billed and logged exactly like an API call. Every object is looked up within the signed-in account:
another account's id is a 404, never a 403 that would confirm it exists.
"""
