-- capmark's srv-query1 under sysbench: the same prepared statement on the same table, keys uniform over its rows
sysbench.cmdline.options = {items = {"rows of capmark.item", 100000}}

function thread_init()
   drv = sysbench.sql.driver()
   con = drv:connect()
   stmt = con:prepare("select id, grp, qty, price, name from capmark.item where id = ?")
   key = stmt:bind_create(sysbench.sql.type.INT)
   stmt:bind_param(key)
end

function event()
   key:set(sysbench.rand.uniform(1, sysbench.opt.items))
   stmt:execute()
end

function thread_done()
   stmt:close()
   con:disconnect()
end
