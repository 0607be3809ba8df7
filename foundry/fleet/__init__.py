"""Operating the fleet of registered models: scoring any versions on data of one's choice (`evaluate*`) and
collecting what nothing references (`gc*`)."""
