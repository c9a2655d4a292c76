module github.com/duroxide-go/cdb

go 1.23

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/joho/godotenv v1.5.1 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
)
