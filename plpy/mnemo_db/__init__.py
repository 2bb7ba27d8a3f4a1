"""In-database Python package of Mnemosyne.

PL/Python function bodies in sql/functions/ are thin: they import a module from this
package and pass it plain values (and ``plpy`` where the database is needed), so the
logic here can be unit-tested outside the server.
"""
