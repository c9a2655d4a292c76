module github.com/duroxide-go/cdb

go 1.23
